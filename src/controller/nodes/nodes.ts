// One watch of the cluster's Nodes for the whole controller: the konnectivity server judges
// agent claims against it and the serving-certificate approver judges CSRs against it, with the
// same rule (base/ownership.ts ownershipProblem). Started after kube-apiserver; until its
// first list it is not `synced` and both wait.
//
// When two Nodes report the same address or name, neither keeps it (no first-reporter privilege:
// a node could otherwise squat the address a future node will have) until an admin resolves it;
// the conflict is shown (kctl status, a Warning event on each Node involved).
import type { Component, ComponentContext, ComponentStatus } from '../../base/component.ts';
import type { Logger } from '../../base/log.ts';
import { runsBefore } from '../../base/version.ts';
import {
  canonicalIdentifier,
  judgePodRanges,
  keeperOf,
  keptAddresses,
  KEEPS_ADDRESSES_ANNOTATION,
  ownedBy,
  type NodeDirectory,
  type NodeRecord,
  type PodRangeVerdict,
  type RefusedPodRange,
  type ReservedSpace,
} from '../../base/ownership.ts';
import type { KubeClient } from '../../kube/client.ts';
import { Informer, type ListWatchOptions } from '../../kube/informer.ts';
import { warningEvent } from '../../kube/events.ts';
import { isNodeReady } from '../../kube/nodes.ts';
import { parseReleaseString, VERSION_ANNOTATION } from '../../kube/upgrade-plan.ts';

interface KubeNode {
  metadata: { name: string; uid?: string; annotations?: Record<string, string> };
  spec?: { podCIDR?: string; podCIDRs?: string[] };
  status?: {
    addresses?: NodeRecord['addresses'];
    daemonEndpoints?: { kubeletEndpoint?: { Port?: number } };
    conditions?: { type: string; status: string }[];
  };
}

const nodeRecord = (n: KubeNode): NodeRecord => ({
  name: n.metadata.name,
  addresses: n.status?.addresses ?? [],
  podCIDRs: n.spec?.podCIDRs ?? (n.spec?.podCIDR ? [n.spec.podCIDR] : []),
  kubeletPort: n.status?.daemonEndpoints?.kubeletEndpoint?.Port || undefined,
  keeps: keptAddresses(n.metadata.annotations),
});

export interface NodeCounts {
  ready: number;
  total: number;
}

/** Listener argument: the Node that changed, or undefined after a (re)list. */
export type NodeChangeListener = (node?: string) => void;

/** Two or more Nodes report one address or name: nobody's, unless an admin named its `keeper`. */
export interface AddressConflict {
  value: string;
  nodes: string[];
  keeper?: string;
}

export class NodeWatchComponent implements Component, NodeDirectory {
  readonly name = 'node-watch';
  private log: Logger | undefined;
  private readonly informer: Informer<KubeNode>;
  private readonly listeners = new Set<NodeChangeListener>();
  /** value -> Nodes that report it (for a name, the Node of that name first); rebuilt on the first question after a change. */
  private index: Map<string, string[]> | undefined;
  /** Each Node's pod ranges as the one rule judges them; rebuilt on the first question after a change. */
  private ranges: PodRangeVerdict | undefined;
  /** Refused ranges already announced (node + range -> reason). */
  private readonly announcedRanges = new Map<string, string>();
  /** Conflicts already announced with events (value -> "owner,others"). */
  private readonly announced = new Map<string, string>();
  private lastError: string | undefined;

  constructor(
    private readonly kube: KubeClient,
    readonly reserved: ReservedSpace | undefined = undefined,
    watch: ListWatchOptions = {},
  ) {
    this.informer = new Informer<KubeNode>(
      kube,
      '/api/v1/nodes',
      watch,
      (type, node) => {
        this.index = undefined;
        this.ranges = undefined;
        if (type === 'LIST') this.lastError = undefined;
        this.announceConflicts();
        this.announceRefusedRanges();
        for (const l of this.listeners) l(type === 'LIST' ? undefined : node?.metadata.name);
      },
      (err) => {
        this.lastError = err.message;
      },
    );
  }

  get synced(): boolean {
    return this.informer.hasSynced;
  }

  /** How many Nodes the cluster has. */
  get size(): number {
    return this.informer.store.size;
  }

  /** How many Nodes are Ready, of how many (kctl status, kctl tenant list). */
  counts(): NodeCounts {
    const all = [...this.informer.store.values()];
    const ready = all.filter(isNodeReady).length;
    return { ready, total: all.length };
  }

  /** The kctl version each Node says it runs (its release annotation), undefined where it names none. */
  kctlVersions(): Map<string, string | undefined> {
    const out = new Map<string, string | undefined>();
    for (const [name, n] of this.informer.store)
      out.set(name, parseReleaseString(n.metadata.annotations?.[VERSION_ANNOTATION])?.version);
    return out;
  }

  /** The names of every Node. */
  names(): string[] {
    return [...this.informer.store.keys()];
  }

  /** The Node as the ownership rule lets others believe it: its pod ranges only as judgePodRanges leaves them. */
  get(name: string): NodeRecord | undefined {
    const n = this.informer.get(name);
    return n && { ...nodeRecord(n), podCIDRs: this.podRanges().ranges.get(name) ?? [] };
  }

  private podRanges(): PodRangeVerdict {
    this.ranges ??= judgePodRanges([...this.informer.store.values()].map(nodeRecord), this.reserved);
    return this.ranges;
  }

  /** Every pod range a Node holds that no traffic is routed to, with why (kctl status). */
  refusedPodRanges(): RefusedPodRange[] {
    return [...this.podRanges().refused].sort((a, b) => a.node.localeCompare(b.node) || a.range.localeCompare(b.range));
  }

  owners(nameOrIp: string): string[] {
    return this.ownerIndex().get(canonicalIdentifier(nameOrIp)) ?? [];
  }

  private ownerIndex(): Map<string, string[]> {
    if (this.index) return this.index;
    const index = new Map<string, string[]>();
    const names = [...this.informer.store.keys()].sort();
    for (const name of names) {
      for (const v of new Set(ownedBy(nodeRecord(this.informer.get(name)!))))
        index.set(v, [...(index.get(v) ?? []), name]);
    }
    // A Node's own name is always its own, whoever else reports it.
    for (const [v, list] of index)
      if (list.includes(v) && list[0] !== v) index.set(v, [v, ...list.filter((n) => n !== v)]);
    this.index = index;
    return index;
  }

  /** Every address or name more than one Node reports, with the Node an admin said keeps it, if any. */
  conflicts(): AddressConflict[] {
    const out: AddressConflict[] = [];
    for (const [value, nodes] of this.ownerIndex()) {
      if (nodes.length < 2) continue;
      const keeper = keeperOf(
        value,
        nodes.map((n) => this.get(n) ?? { name: n }),
      );
      out.push({ value, nodes, ...(keeper ? { keeper } : {}) });
    }
    return out.sort((a, b) => a.value.localeCompare(b.value));
  }

  /** One warn line and one Warning event on each Node involved, once per conflict as it appears. */
  private announceConflicts(): void {
    const current = new Map(this.conflicts().map((c) => [c.value, c] as const));
    for (const v of this.announced.keys()) if (!current.has(v)) this.announced.delete(v);
    for (const c of current.values()) {
      const key = `${c.nodes.join(',')} ${c.keeper ?? ''}`;
      if (this.announced.get(c.value) === key) continue;
      this.announced.set(c.value, key);
      const message = c.keeper
        ? `${c.value} is reported by nodes ${c.nodes.join(', ')}; node ${c.keeper} keeps it (${KEEPS_ADDRESSES_ANNOTATION}, set by an admin)`
        : `${c.value} is reported by nodes ${c.nodes.join(', ')}: nobody's (tunnel, pod network) until an admin deletes the Node that lies or names the keeper (kubectl annotate node NAME ${KEEPS_ADDRESSES_ANNOTATION}=${c.value})`;
      this.log?.warn({ address: c.value, nodes: c.nodes, keeper: c.keeper }, `address conflict: ${message}`);
      for (const node of c.nodes) void this.nodeEvent(node, 'AddressConflict', message);
    }
  }

  /** One warn line and one Warning event on the Node, once per refused range as it appears. */
  private announceRefusedRanges(): void {
    const current = new Map<string, RefusedPodRange>(this.refusedPodRanges().map((r) => [`${r.node} ${r.range}`, r]));
    for (const k of this.announcedRanges.keys()) if (!current.has(k)) this.announcedRanges.delete(k);
    for (const [k, r] of current) {
      if (this.announcedRanges.get(k) === r.reason) continue;
      this.announcedRanges.set(k, r.reason);
      const message = `pod range ${r.range} of node ${r.node} is refused: ${r.reason}; the tunnel and the pod network route nothing to it`;
      this.log?.warn({ node: r.node, podCIDR: r.range }, message);
      void this.nodeEvent(r.node, 'PodRangeRefused', message);
    }
  }

  private async nodeEvent(node: string, reason: string, message: string): Promise<void> {
    const uid = this.informer.get(node)?.metadata.uid;
    await warningEvent(this.kube, { kind: 'Node', name: node, uid }, reason, message, 'kctl-controller').catch(
      (err: Error) => (this.lastError = `cannot record a ${reason} event on node ${node}: ${err.message}`),
    );
  }

  onChange(listener: NodeChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    this.informer.start();
  }

  async stop(): Promise<void> {
    await this.informer.stop();
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.lastError };
  }
}

/** The Nodes that say they run a kctl before `since` (kctlVersions), or name no release, by name. */
export function nodesBefore(versions: Map<string, string | undefined>, since: string): string[] {
  return [...versions]
    .filter(([, v]) => runsBefore(v, since))
    .map(([name]) => name)
    .sort();
}
