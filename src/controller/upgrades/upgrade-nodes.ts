// The nodes' turns in an upgrade plan, once every controller runs the target. One controller (the
// holder of the upgrade lease) lets nodes go, at most spec.upgrade.maxUnavailable at a time: with
// spec.upgrade.drain it cordons a node and evicts its pods through the Eviction API (so
// PodDisruptionBudgets hold) until none is left or drainTimeout passes, then names the node in the
// plan's `admitted`. The node itself does the rest (worker/upgrade.ts): it downloads, swaps, restarts
// and reports on its Node object. When it reports done and is Ready, it is uncordoned and leaves
// `admitted`; a node that rolled back stops the plan. A node that says nothing for the ready timeout
// and more gives its turn to the next one (a thin link may have cut it off: it comes back later). The
// controller only ever touches what it owns: a node cordoned by someone else stays cordoned.
import { messageOf } from '../../base/errors.ts';
import type { Logger } from '../../base/log.ts';
import { KubeApiError, type KubeClient } from '../../kube/client.ts';
import { isNodeReady, nodePath, type NodeConditions } from '../../kube/nodes.ts';
import {
  parseMemberUpgrade,
  parseReleaseString,
  UPGRADE_ANNOTATION,
  VERSION_ANNOTATION,
  type MemberUpgrade,
  type Release,
  type UpgradePlan,
} from '../../kube/upgrade-plan.ts';

/** On a Node this controller cordoned for an upgrade: {"since": ISO, "cordoned": whether it set unschedulable}. */
export const CORDON_ANNOTATION = 'kctl.dev/upgrade-cordoned';
/** A node admitted and silent for the ready timeout and this long gives its turn up. */
export const SILENCE_SLACK_S = 120;

/** What the step needs of a Node. */
export interface NodeView {
  name: string;
  ready: boolean;
  release?: Release;
  upgrade?: MemberUpgrade;
  /** Set when this controller cordoned it for the upgrade. */
  cordon?: { since: string; cordoned: boolean };
}

export interface NodeStep {
  /** Nodes whose turn ends (done, rolled back, silent, gone), with why. */
  release: { node: string; why: string }[];
  /** Nodes to uncordon (their cordon was this upgrade's). */
  uncordon: string[];
  /** Nodes to cordon now and start draining (drain on). */
  startDrain: string[];
  /** Nodes being drained: evict, and admit when empty or past the drain timeout. */
  draining: string[];
  /** Nodes to admit at once (drain off). */
  admit: string[];
  /** Why the plan stops, when it must. */
  stop?: string;
  /** Every node runs the target and nobody is mid-turn. */
  done: boolean;
}

/** Decides the next moves from the plan and the nodes as they are; does nothing itself. */
export function nodeStep(plan: UpgradePlan, nodes: NodeView[], now: number): NodeStep {
  const target = plan.target.version;
  const byName = new Map(nodes.map((n) => [n.name, n]));
  const atTarget = (n: NodeView) => n.release?.version === target;
  const step: NodeStep = { release: [], uncordon: [], startDrain: [], draining: [], admit: [], done: false };
  const stillAdmitted: string[] = [];
  for (const [name, since] of Object.entries(plan.admitted)) {
    const n = byName.get(name);
    const u = n?.upgrade?.target === target ? n.upgrade : undefined;
    const lastWord = Math.max(Date.parse(since) || 0, u ? Date.parse(u.at) || 0 : 0);
    if (!n) step.release.push({ node: name, why: 'the node is gone' });
    else if (atTarget(n) && u?.state === 'done' && n.ready)
      step.release.push({ node: name, why: `runs kctl ${target} and is Ready` });
    else if (u?.state === 'rolled back' || u?.state === 'failed') {
      step.release.push({ node: name, why: u.state });
      step.stop ??= `node ${name}: ${u.reason ?? u.state}`;
    } else if (now - lastWord > (plan.readyTimeoutS + SILENCE_SLACK_S) * 1000)
      step.release.push({
        node: name,
        why: `no word from it for ${Math.round((now - lastWord) / 1000)} s; it goes again later`,
      });
    else stillAdmitted.push(name);
    if (n?.cordon && !stillAdmitted.includes(name)) step.uncordon.push(name);
  }
  // A cordon left from a turn that ended elsewhere (another controller held the lease): lift it.
  for (const n of nodes)
    if (n.cordon && !(n.name in plan.admitted) && atTarget(n) && !step.uncordon.includes(n.name))
      step.uncordon.push(n.name);
  step.draining = nodes.filter((n) => n.cordon && !(n.name in plan.admitted) && !atTarget(n)).map((n) => n.name);
  if (step.stop) return step;
  // Only nodes that name their release can upgrade themselves; a NotReady node waits until it is back.
  const pending = nodes
    .filter((n) => n.release && n.ready && !atTarget(n) && !(n.name in plan.admitted) && !n.cordon)
    .map((n) => n.name);
  const slots = Math.max(0, plan.maxUnavailable - stillAdmitted.length - step.draining.length);
  const next = pending.sort().slice(0, slots);
  if (plan.drain) step.startDrain = next;
  else step.admit = next;
  step.done = stillAdmitted.length === 0 && step.draining.length === 0 && nodes.every(atTarget);
  return step;
}

export interface NodeObject extends NodeConditions {
  metadata: { name: string; annotations?: Record<string, string> };
  spec?: { unschedulable?: boolean };
}

interface PodObject {
  metadata: {
    name: string;
    namespace: string;
    ownerReferences?: { kind: string; controller?: boolean }[];
    deletionTimestamp?: string;
  };
  status?: { phase?: string };
}

function parseCordon(text: string | undefined): NodeView['cordon'] {
  if (!text) return undefined;
  try {
    const v = JSON.parse(text) as { since?: unknown; cordoned?: unknown };
    return typeof v.since === 'string' ? { since: v.since, cordoned: v.cordoned === true } : undefined;
  } catch {
    return undefined;
  }
}

export function nodeView(n: NodeObject): NodeView {
  const a = n.metadata.annotations ?? {};
  const release = parseReleaseString(a[VERSION_ANNOTATION]);
  const upgrade = parseMemberUpgrade(a[UPGRADE_ANNOTATION]);
  const cordon = parseCordon(a[CORDON_ANNOTATION]);
  return {
    name: n.metadata.name,
    ready: isNodeReady(n),
    ...(release ? { release } : {}),
    ...(upgrade ? { upgrade } : {}),
    ...(cordon ? { cordon } : {}),
  };
}

/**
 * Pods a drain moves off the node: those a controller other than a DaemonSet makes again
 * elsewhere, not finished. A pod of no controller would be gone for good, and a DaemonSet's comes
 * back: they stay, and keep running through the node's restart as every container does. A pod
 * already going still counts until it is gone: until its kubelet confirms, clients (kubectl exec
 * deploy/..., Services) may still pick it, so the node must not restart under it.
 */
export function drainable(p: PodObject): boolean {
  const owner = p.metadata.ownerReferences?.find((o) => o.controller === true);
  return (
    owner !== undefined && owner.kind !== 'DaemonSet' && p.status?.phase !== 'Succeeded' && p.status?.phase !== 'Failed'
  );
}

/** Carries out the nodes' part of a plan with the controller's admin client. */
export class NodeUpgrades {
  constructor(
    private readonly kube: KubeClient,
    private readonly log: Logger,
  ) {}

  /** One pass: returns the plan as it should be written (admitted changed), or the reason to stop it, or 'done'. */
  async pass(plan: UpgradePlan): Promise<{ admitted: Record<string, string>; stop?: string; done: boolean }> {
    const nodes = (await this.kube.get<{ items: NodeObject[] }>('/api/v1/nodes')).items.map(nodeView);
    const step = nodeStep(plan, nodes, Date.now());
    const admitted = { ...plan.admitted };
    for (const r of step.release) {
      delete admitted[r.node];
      this.log.info({ node: r.node, why: r.why }, `node ${r.node}: its upgrade turn ends (${r.why})`);
    }
    for (const name of step.uncordon) await this.uncordon(nodes.find((n) => n.name === name)!);
    if (step.stop) return { admitted, stop: step.stop, done: false };
    const now = new Date().toISOString();
    for (const name of step.admit) admitted[name] = now;
    for (const name of step.startDrain) await this.cordon(name);
    for (const name of [...step.startDrain, ...step.draining]) {
      const since = nodes.find((n) => n.name === name)?.cordon?.since ?? now;
      if (await this.drained(name, since, plan.drainTimeoutS)) admitted[name] = new Date().toISOString();
    }
    for (const name of Object.keys(admitted))
      if (!(name in plan.admitted))
        this.log.info({ node: name, target: plan.target.version }, `node ${name}: its turn to upgrade`);
    return { admitted, done: step.done };
  }

  private async cordon(name: string): Promise<void> {
    const n = await this.kube.get<NodeObject>(nodePath(name));
    const cordoned = n.spec?.unschedulable !== true;
    await this.kube.request('PATCH', nodePath(name), {
      metadata: { annotations: { [CORDON_ANNOTATION]: JSON.stringify({ since: new Date().toISOString(), cordoned }) } },
      ...(cordoned ? { spec: { unschedulable: true } } : {}),
    });
    this.log.info({ node: name }, `node ${name}: cordoned and draining for its upgrade`);
  }

  private async uncordon(n: NodeView): Promise<void> {
    await this.kube
      .request('PATCH', nodePath(n.name), {
        metadata: { annotations: { [CORDON_ANNOTATION]: null } },
        ...(n.cordon?.cordoned ? { spec: { unschedulable: false } } : {}),
      })
      .catch((err: unknown) => {
        if (!(err instanceof KubeApiError && err.status === 404)) throw err;
      });
    if (n.cordon?.cordoned) this.log.info({ node: n.name }, `node ${n.name}: uncordoned`);
  }

  /** Evicts what may go; true once every drainable pod is gone (deleted, not only going), or the drain timeout has passed. */
  private async drained(node: string, since: string, timeoutS: number): Promise<boolean> {
    const pods = (
      await this.kube.get<{ items: PodObject[] }>(
        `/api/v1/pods?fieldSelector=${encodeURIComponent(`spec.nodeName=${node}`)}`,
      )
    ).items.filter(drainable);
    if (!pods.length) return true;
    const blocked: string[] = [];
    for (const p of pods) {
      if (p.metadata.deletionTimestamp) {
        blocked.push(`${p.metadata.namespace}/${p.metadata.name} (terminating)`);
        continue;
      }
      const { namespace, name } = p.metadata;
      try {
        await this.kube.request(
          'POST',
          `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(name)}/eviction`,
          {
            apiVersion: 'policy/v1',
            kind: 'Eviction',
            metadata: { name, namespace },
          },
        );
      } catch (err) {
        // 429: a PodDisruptionBudget does not allow it now; 404: it is gone already.
        if (err instanceof KubeApiError && err.status === 404) continue;
        blocked.push(
          `${namespace}/${name}${err instanceof KubeApiError && err.status === 429 ? '' : ` (${messageOf(err)})`}`,
        );
      }
    }
    if (blocked.length && Date.now() - Date.parse(since) > timeoutS * 1000) {
      this.log.warn(
        { node, blocked },
        `node ${node}: drain timeout passed; it upgrades with ${blocked.join(', ')} still on it (they keep running)`,
      );
      return true;
    }
    return false;
  }
}
