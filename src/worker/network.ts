// Pod networking without an overlay: a CNI bridge for this node's podCIDR (assigned by
// kube-controller-manager), and a route to every other node's podCIDR via that node's
// InternalIP (nodes share an L2 network or routed underlay, like kubenet / k3s host-gw).
//
// Watches Nodes with the kubelet's own credentials (the Node authorizer allows a node to
// get/list/watch Nodes): a node's podCIDR or address change reroutes at once. Routes carry protocol ROUTE_PROTO so a sync only ever touches
// routes kctl made; stop() leaves them (pods keep running across restarts), cleanup() removes them.
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { execa } from 'execa';
import type { KubeClient } from '../kube/client.ts';
import { Informer, type ListWatchOptions } from '../kube/informer.ts';
import type { Logger } from '../base/log.ts';
import type { Component, ComponentContext, ComponentStatus } from '../base/component.ts';
import type { WorkerPaths } from './paths.ts';
import { reasonOf } from '../base/errors.ts';
import { sysctlFile } from '../host/limits.ts';

export const CNI_BRIDGE = 'kctl0';
export const CNI_NETWORK_NAME = 'kctl';
export const CNI_CONFLIST = '10-kctl.conflist';
/** Routing protocol number on kctl's routes (unassigned in rtnetlink; see /etc/iproute2/rt_protos). */
export const ROUTE_PROTO = '177';

export interface NodeInfo {
  name: string;
  podCIDR?: string;
  internalIP?: string;
}

export interface NetworkOptions {
  paths: WorkerPaths;
  nodeName: string;
  /** The worker's API client, with the kubelet's credentials. */
  kube: KubeClient;
  /** The cluster's pod CIDR (all nodes): pod traffic inside it keeps its source address. */
  clusterCIDR: string;
  /** How often routes are re-checked against the watched Nodes without a change (repairs routes removed by hand, retries a failed sync). Default 30 s. */
  syncIntervalMs?: number;
  /** Watch tuning (tests). */
  watch?: ListWatchOptions;
}

export function cniConflist(podCIDR: string, paths: WorkerPaths): Record<string, unknown> {
  return {
    cniVersion: '1.0.0',
    name: CNI_NETWORK_NAME,
    plugins: [
      {
        type: 'bridge',
        bridge: CNI_BRIDGE,
        isGateway: true,
        // Not the bridge plugin's masquerade (it rewrites traffic to other nodes' pods too): kctl's
        // own rule masquerades only traffic that leaves the cluster CIDR (masqueradeRule).
        ipMasq: false,
        hairpinMode: true,
        ipam: {
          type: 'host-local',
          ranges: [[{ subnet: podCIDR }]],
          routes: [{ dst: '0.0.0.0/0' }],
          dataDir: paths.cniStateDir,
        },
      },
      { type: 'portmap', capabilities: { portMappings: true }, snat: true },
    ],
  };
}

/** nat-table chain with kctl's masquerade rule; `kctl reset` removes it (and only it of the KCTL-* names). */
export const MASQ_CHAIN = 'KCTL-POSTROUTING';

/** The iptables rule (nat table) that makes this node's pods masquerade only outside the cluster CIDR. */
export function masqueradeRule(podCIDR: string, clusterCIDR: string): string[] {
  return [
    '-A',
    MASQ_CHAIN,
    '-s',
    podCIDR,
    '!',
    '-d',
    clusterCIDR,
    '-m',
    'comment',
    '--comment',
    'kctl: pods leaving the cluster CIDR',
    '-j',
    'MASQUERADE',
  ];
}

async function iptables(args: string[]): Promise<{ ok: boolean; stderr: string }> {
  const r = await execa('iptables', ['-w', '5', '-t', 'nat', ...args], { reject: false, extendEnv: false, env: IP_ENV });
  return { ok: r.exitCode === 0, stderr: String(r.stderr).trim() };
}

/** (Re)writes kctl's masquerade chain and hooks it into POSTROUTING once. */
async function ensureMasquerade(podCIDR: string, clusterCIDR: string, log: Logger): Promise<void> {
  await iptables(['-N', MASQ_CHAIN]); // exists already on a restart
  await iptables(['-F', MASQ_CHAIN]);
  const rule = masqueradeRule(podCIDR, clusterCIDR);
  const added = await iptables(rule);
  if (!added.ok) throw new Error(`iptables ${rule.join(' ')}: ${added.stderr}`);
  if (!(await iptables(['-C', 'POSTROUTING', '-j', MASQ_CHAIN])).ok) {
    const r = await iptables(['-A', 'POSTROUTING', '-j', MASQ_CHAIN]);
    if (!r.ok) throw new Error(`iptables -A POSTROUTING -j ${MASQ_CHAIN}: ${r.stderr}`);
  }
  log.info({ podCIDR, clusterCIDR }, 'pod traffic is masqueraded only when it leaves the cluster CIDR');
}

/** Routes this node needs: every other node that has a podCIDR and an InternalIP. */
export function desiredRoutes(nodes: NodeInfo[], self: string): Map<string, string> {
  const routes = new Map<string, string>();
  for (const n of nodes) {
    if (n.name === self || !n.podCIDR || !n.internalIP) continue;
    if (n.podCIDR.includes(':') || n.internalIP.includes(':')) continue; // IPv4 only for now
    routes.set(n.podCIDR, n.internalIP);
  }
  return routes;
}

interface KubeNode {
  metadata: { name: string };
  spec?: { podCIDR?: string };
  status?: { addresses?: { type: string; address: string }[] };
}

function nodeInfo(n: KubeNode): NodeInfo {
  return {
    name: n.metadata.name,
    podCIDR: n.spec?.podCIDR,
    internalIP: n.status?.addresses?.find((a) => a.type === 'InternalIP')?.address,
  };
}

const IP_ENV = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' };

async function ip(args: string[]): Promise<string> {
  const r = await execa('ip', args, { reject: false, extendEnv: false, env: IP_ENV, timeout: 10_000 });
  if (r.exitCode !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr.trim()}`);
  return r.stdout;
}

/** kctl's routes in this network namespace: podCIDR -> gateway. */
export async function currentRoutes(): Promise<Map<string, string>> {
  const out = JSON.parse((await ip(['-j', '-4', 'route', 'show', 'proto', ROUTE_PROTO])) || '[]') as { dst: string; gateway?: string }[];
  return new Map(out.map((r) => [r.dst, r.gateway ?? '']));
}

/**
 * Writes the CNI config so that containerd notices: its conf dir watcher ignores Create events
 * (a rename into the dir is one) and reloads on Write and Rename. A first config is written in
 * place (one small write: Create, then Write with the whole content); a changed one through a
 * temp file in the same dir (libcni skips *.tmp) renamed over it.
 */
async function writeIfChanged(file: string, text: string, mode = 0o644): Promise<boolean> {
  if (!existsSync(file)) {
    await writeFile(file, text, { mode });
    return true;
  }
  if ((await readFile(file, 'utf8')) === text) return false;
  const tmp = join(dirname(file), `.${basename(file)}.tmp`);
  await writeFile(tmp, text, { mode });
  await rename(tmp, file);
  return true;
}

/** Best effort: a sysctl that cannot be set is logged, not fatal (the host may set it already). */
async function setSysctl(key: string, value: string, log: Logger): Promise<void> {
  const file = sysctlFile(key);
  try {
    if ((await readFile(file, 'utf8')).trim() === value) return;
    await writeFile(file, value);
  } catch (err) {
    log.warn({ sysctl: key }, `cannot set ${key}=${value}: ${reasonOf(err)}`);
  }
}

export class NetworkComponent implements Component {
  readonly name = 'network';
  /** Waits for kube-controller-manager to assign the podCIDR. */
  readonly readyTimeoutMs = 180_000;
  private timer?: NodeJS.Timeout;
  private nodes?: Informer<KubeNode>;
  /** Wakes ready() when the watch brings a change or an error. */
  private changed: () => void = () => undefined;
  private lastWatchError?: string;
  /** Set once the CNI config is written: from then on every Node change reroutes. */
  private routing = false;
  private syncing?: Promise<void>;
  private dirty = false;
  private podCIDR?: string;
  private lastSyncError?: string;

  private log!: Logger;

  constructor(private readonly opts: NetworkOptions) {}

  get conflistPath(): string {
    return join(this.opts.paths.cniConfDir, CNI_CONFLIST);
  }

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
    const { paths } = this.opts;
    for (const d of [paths.cniConfDir, paths.cniStateDir]) await mkdir(d, { recursive: true, mode: 0o755 });
  }

  async start(): Promise<void> {
    this.nodes ??= new Informer<KubeNode>(
      this.opts.kube,
      '/api/v1/nodes',
      this.opts.watch ?? {},
      () => {
        this.lastWatchError = undefined;
        this.changed();
        if (this.routing) void this.sync();
      },
      (err) => {
        this.lastWatchError = reasonOf(err);
        this.changed();
      },
    );
    this.nodes.start();
  }

  async ready(signal: AbortSignal): Promise<void> {
    const { nodeName } = this.opts;
    const log = this.log;
    for (;;) {
      const self = this.nodes?.get(nodeName);
      if (self?.spec?.podCIDR) {
        this.podCIDR = self.spec.podCIDR;
        break;
      }
      if (signal.aborted) {
        const why =
          this.lastWatchError ??
          (!this.nodes?.hasSynced
            ? 'Nodes not listed yet'
            : self
              ? 'not assigned yet (is kube-controller-manager running with --allocate-node-cidrs?)'
              : 'the node is not registered yet');
        throw new Error(`node ${nodeName} has no podCIDR: ${why}`);
      }
      await new Promise<void>((resolve) => {
        const done = () => {
          signal.removeEventListener('abort', done);
          this.changed = () => undefined;
          resolve();
        };
        this.changed = done;
        signal.addEventListener('abort', done, { once: true });
      });
    }
    await setSysctl('net.ipv4.ip_forward', '1', log);
    // br_netfilter: bridged pod traffic must pass iptables for Service DNAT on hairpin paths.
    await execa('modprobe', ['br_netfilter'], { reject: false, extendEnv: false, env: IP_ENV });
    await setSysctl('net.bridge.bridge-nf-call-iptables', '1', log);
    await this.writePodNetwork(this.podCIDR);
    this.routing = true;
    await this.sync();
    this.timer = setInterval(() => {
      void this.sync();
    }, this.opts.syncIntervalMs ?? 30_000);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    this.routing = false;
    await this.nodes?.stop();
    await this.syncing;
  }

  /** A problem while running (routes, the Node watch); failures to start are the manager's to report. */
  status(): Partial<ComponentStatus> {
    return { lastError: this.routing ? (this.lastSyncError ?? this.lastWatchError) : undefined };
  }

  /** This node's masquerade rule and CNI config for its podCIDR (at start, and when the podCIDR changes). */
  private async writePodNetwork(podCIDR: string): Promise<void> {
    const { paths, clusterCIDR } = this.opts;
    const log = this.log;
    await ensureMasquerade(podCIDR, clusterCIDR, log);
    if (await writeIfChanged(this.conflistPath, JSON.stringify(cniConflist(podCIDR, paths), null, 2) + '\n')) {
      log.info({ podCIDR, file: this.conflistPath }, 'wrote CNI config');
    }
  }

  /** Reconciles routes with the watched Nodes; a change during a sync runs one more. Errors are logged and retried. */
  sync(): Promise<void> {
    if (this.syncing) {
      this.dirty = true;
      return this.syncing;
    }
    this.syncing = (async () => {
      do {
        this.dirty = false;
        await this.doSync();
      } while (this.dirty && this.routing);
    })().finally(() => {
      this.syncing = undefined;
    });
    return this.syncing;
  }

  private async doSync(): Promise<void> {
    const { nodeName } = this.opts;
    const log = this.log;
    try {
      const nodes = [...(this.nodes?.store.values() ?? [])].map(nodeInfo);
      const self = nodes.find((n) => n.name === nodeName);
      if (self?.podCIDR && this.podCIDR && self.podCIDR !== this.podCIDR) {
        log.warn(
          { was: this.podCIDR, now: self.podCIDR },
          'podCIDR of this node changed; rewriting the CNI config (running pods keep their old addresses)',
        );
        this.podCIDR = self.podCIDR;
        await this.writePodNetwork(this.podCIDR);
      }
      const want = desiredRoutes(nodes, nodeName);
      const have = await currentRoutes();
      const errors: string[] = [];
      for (const [cidr, via] of want) {
        if (have.get(cidr) === via) continue;
        try {
          await ip(['route', 'replace', cidr, 'via', via, 'proto', ROUTE_PROTO]);
          log.info({ podCIDR: cidr, via }, 'route to node pod network');
        } catch (err) {
          errors.push(reasonOf(err));
        }
      }
      for (const cidr of have.keys()) {
        if (want.has(cidr)) continue;
        await ip(['route', 'del', cidr, 'proto', ROUTE_PROTO]).catch((err: unknown) => errors.push(reasonOf(err)));
        log.info({ podCIDR: cidr }, 'removed route to a node that is gone');
      }
      if (errors.length) throw new Error(errors.join('; '));
      this.lastSyncError = undefined;
    } catch (err) {
      const reason = reasonOf(err);
      if (reason !== this.lastSyncError) log.warn(`route sync failed: ${reason}`);
      this.lastSyncError = reason;
    }
  }
}

/** For `kctl reset`: removes kctl's routes, the CNI config and IPAM state, and the bridge. */
export async function cleanupNetwork(paths: WorkerPaths): Promise<void> {
  for (const cidr of (await currentRoutes().catch(() => new Map<string, string>())).keys()) {
    await ip(['route', 'del', cidr, 'proto', ROUTE_PROTO]).catch(() => undefined);
  }
  await rm(join(paths.cniConfDir, CNI_CONFLIST), { force: true });
  await rm(paths.cniStateDir, { recursive: true, force: true });
  await ip(['link', 'del', CNI_BRIDGE]).catch(() => undefined);
}
