// `kctl upgrade plan` and `kctl upgrade status`, run on a controller host with its admin
// credentials. A plan names the target (read from the new executable itself: `<file> version -o
// json`), its sha256 and size; the executable is kept under this controller's data dir, from where
// it serves it to the other controllers (executables.ts). Every member of the cluster must be
// able to take the step (version-skew.ts) before anything is written.
import { mkdir, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import { parseDuration } from '../../base/duration.ts';
import { UserError } from '../../base/errors.ts';
import { kctlExecutable } from '../../base/executable.ts';
import { sha256OfFile } from '../../base/fs.ts';
import { KCTL_VERSION, type Release } from '../../base/version.ts';
import type { KubeClient } from '../../kube/client.ts';
import { CONTROLLER_LEASE_LABEL, LEASES_PATH, liveControllers, type Lease } from '../../kube/controller-leases.ts';
import {
  readUpgradePlan,
  UnreadablePlanError,
  writeUpgradePlan,
  type MemberUpgrade,
  type UpgradePlan,
} from '../../kube/upgrade-plan.ts';
import { skewProblem } from '../../kube/version-skew.ts';
import { installExecutable } from '../../supervisor/handover.ts';
import type { ClusterConfig } from '../config/config.ts';
import { keptExecutable, releaseOfExecutable } from '../../payload/upgrade-files.ts';
import { nodeView, type NodeObject } from './upgrade-nodes.ts';

/** One controller or node as `kctl upgrade status` shows it. */
export interface MemberStatus {
  kind: 'controller' | 'node';
  name: string;
  /** The release it runs; absent when it does not say (a kctl from before upgrades, or a node not yet reporting). */
  release?: Release;
  /** A node's kubelet version (status.nodeInfo), which every node reports. */
  kubelet?: string;
  upgrade?: MemberUpgrade;
  /** A controller of the plan with no live lease (stopped, restarting or lost). */
  down?: boolean;
  /** A node cordoned for the plan and being drained before its turn. */
  draining?: boolean;
}

export interface UpgradeStatus {
  plan: UpgradePlan | null;
  members: MemberStatus[];
}

interface NodeWithInfo extends NodeObject {
  status?: NodeObject['status'] & { nodeInfo?: { kubeletVersion?: string } };
}

/**
 * The plan and every member. A plan object that is not a plan throws (UnreadablePlanError), unless
 * `onUnreadablePlan` takes it: then the plan reads as none (kctl upgrade plan replaces it).
 */
export async function upgradeStatus(
  kube: KubeClient,
  o: { onUnreadablePlan?: (err: UnreadablePlanError) => void } = {},
): Promise<UpgradeStatus> {
  const [plan, leases, nodes] = await Promise.all([
    readUpgradePlan(kube).catch((err: unknown) => {
      if (!(err instanceof UnreadablePlanError) || !o.onUnreadablePlan) throw err;
      o.onUnreadablePlan(err);
      return null;
    }),
    kube.get<{ items: Lease[] }>(
      `${LEASES_PATH}?labelSelector=${encodeURIComponent(`${CONTROLLER_LEASE_LABEL}=true`)}`,
    ),
    kube.get<{ items: NodeWithInfo[] }>('/api/v1/nodes'),
  ]);
  const controllers: MemberStatus[] = liveControllers(leases.items).map((c) => ({
    kind: 'controller',
    name: c.name,
    ...(c.release ? { release: c.release } : {}),
    ...(c.upgrade ? { upgrade: c.upgrade } : {}),
  }));
  const workers: MemberStatus[] = nodes.items.map((n) => {
    // Read as the controller letting nodes go reads it (upgrade-nodes.ts).
    const { release, upgrade, cordon } = nodeView(n);
    const kubelet = n.status?.nodeInfo?.kubeletVersion;
    const draining =
      plan?.state === 'active' &&
      cordon !== undefined &&
      !(n.metadata.name in plan.admitted) &&
      release?.version !== plan.target.version;
    return {
      kind: 'node',
      name: n.metadata.name,
      ...(release ? { release } : {}),
      ...(kubelet ? { kubelet } : {}),
      ...(upgrade ? { upgrade } : {}),
      ...(draining ? { draining } : {}),
    };
  });
  // A controller of the plan whose lease is gone is down (restarting, or lost): shown as such.
  const down: MemberStatus[] = (plan?.controllers ?? [])
    .filter((name) => !controllers.some((c) => c.name === name))
    .map((name) => ({ kind: 'controller', name, down: true }));
  return {
    plan,
    members: [
      ...[...controllers, ...down].sort((x, y) => x.name.localeCompare(y.name)),
      ...workers.sort((x, y) => x.name.localeCompare(y.name)),
    ],
  };
}

export interface PlanOptions {
  kube: KubeClient;
  cfg: ClusterConfig;
  dataDir: string;
  /** The new executable; default the one running this command. */
  executable?: string;
  /** The version the user expects it to be (--version). */
  version?: string;
  progress: (line: string) => void;
}

/** Writes the plan for the given executable, after checking that every member can take the step. */
export async function createUpgradePlan(o: PlanOptions): Promise<UpgradePlan> {
  const file = o.executable ?? kctlExecutable();
  if (!file)
    throw new UserError('this kctl does not run from a kctl executable; give the new one with --executable PATH');
  const release = await releaseOfExecutable(file);
  if (o.version && o.version.replace(/^v/, '') !== release.version.replace(/^v/, ''))
    throw new UserError(
      `${file} is kctl ${release.version}, not ${o.version}; give the executable of ${o.version} with --executable`,
    );
  const status = await upgradeStatus(o.kube, {
    onUnreadablePlan: (err) => o.progress(`replacing the unreadable plan: ${err.message}`),
  });
  const current = status.plan;
  if (current?.state === 'active' && current.target.version !== release.version)
    throw new UserError(
      `an upgrade to ${current.target.version} is under way; wait until kctl upgrade status shows it done or stopped, then plan ${release.version}`,
    );
  const members = status.members.map((m) => ({
    name: `${m.kind} ${m.name}`,
    version: m.release?.version ?? release.version,
    kubernetes: m.release?.kubernetes ?? m.kubelet ?? release.kubernetes,
    etcd: m.release?.etcd ?? release.etcd,
  }));
  const unknown = status.members.filter((m) => m.kind === 'controller' && !m.release);
  if (unknown.length)
    throw new UserError(
      `${unknown.map((m) => m.name).join(', ')} run a kctl without upgrades; upgrade them by hand first`,
    );
  if (current?.state !== 'active' && status.members.every((m) => m.release?.version === release.version))
    throw new UserError(`every controller and node already runs kctl ${release.version}; nothing to upgrade`);
  const problem = skewProblem(members, release);
  if (problem)
    throw new UserError(`cannot upgrade to kctl ${release.version} (Kubernetes ${release.kubernetes}): ${problem}`);
  o.progress(
    `kctl ${release.version} carries Kubernetes ${release.kubernetes} and etcd ${release.etcd}; checking ${file}`,
  );
  const sha256 = await sha256OfFile(file);
  const size = (await stat(file)).size;
  if (!sha256) throw new UserError(`cannot read ${file}`);
  // The running executable is served as it is; another file is kept under the data dir.
  if (file !== kctlExecutable() || release.version !== KCTL_VERSION) {
    await mkdir(dirname(keptExecutable(o.dataDir, release.version)), { recursive: true, mode: 0o755 });
    await installExecutable(file, keptExecutable(o.dataDir, release.version));
  }
  const u = o.cfg.spec.upgrade;
  const plan = await writeUpgradePlan(o.kube, {
    target: { ...release, sha256, size },
    created: new Date().toISOString(),
    drain: u.drain,
    drainTimeoutS: Math.round((parseDuration(u.drainTimeout) ?? 0) / 1000),
    maxUnavailable: u.maxUnavailable,
    readyTimeoutS: Math.round((parseDuration(u.readyTimeout) ?? 0) / 1000),
    state: 'active',
    controllers: status.members.filter((m) => m.kind === 'controller').map((m) => m.name),
    admitted: {},
    ...(current?.resourceVersion ? { resourceVersion: current.resourceVersion } : {}),
  });
  o.progress(`plan written: controllers upgrade one at a time, then nodes (at most ${plan.maxUnavailable} at once)`);
  return plan;
}
