// The pod network between nodes: a CNI bridge for this node's podCIDR (assigned by
// kube-controller-manager, cni.ts), and a route to every other node's podCIDR, in the mode the
// cluster publishes (kube/pod-network.ts):
//   routes  via that node's InternalIP (one L2 network or a routed underlay, like k3s host-gw);
//   vxlan   via that node's VTEP on kctl's VXLAN device (host/vxlan.ts), over any IP path;
//   wireguard  on kctl-wg (wireguard.ts), encrypted; overlay.ts holds what each mode puts in place.
//
// Watches Nodes with the kubelet's own credentials (the Node authorizer allows a node to
// get/list/watch Nodes) and the mode's ConfigMap: a node's podCIDR or address change, or a new
// mode, reroutes at once. Routes carry protocol ROUTE_PROTO so a sync only ever touches routes
// kctl made; stop() leaves them (pods keep running across restarts), cleanupNetwork() removes them.
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { ip, SYSTEM_PATH_ENV } from '../host/ip.ts';
import { removeVxlan } from '../host/vxlan.ts';
import { removePodToNodeRoutes } from './wireguard.ts';
import { cleanupNetworkPolicy } from './network-policy.ts';
import { ControllerRelay, type DatagramLink } from './controller-relay.ts';
import { desiredRoutes, Overlay, type PodNetworkStatus } from './overlay.ts';
import { removePodRoutes, syncPodRoutes } from './pod-routes.ts';
import { routableNodes, type KubeNode, type NodeInfo, type RefusedPeer } from './peers.ts';
import { canonicalIdentifier, type RefusedPodRange, type ReservedSpace } from '../base/ownership.ts';
import { urlHost } from '../base/addresses.ts';
import { controllerHosts, type LiveController } from '../kube/controller-leases.ts';
import {
  LEGACY_POD_NETWORK,
  parsePodNetwork,
  POD_NETWORK_COLLECTION,
  POD_NETWORK_NAME,
  type PodNetwork,
} from '../kube/pod-network.ts';
import { CNI_BRIDGE, CNI_CONFLIST, cniConflist, ensureMasquerade, writeIfChanged } from './cni.ts';
import type { KubeClient } from '../kube/client.ts';
import { Informer, NODE_WATCH, type ListWatchOptions, type WatchedObject } from '../kube/informer.ts';
import type { Logger } from '../base/log.ts';
import type { Component, ComponentContext, ComponentStatus } from '../base/component.ts';
import type { WorkerPaths } from './paths.ts';
import { reasonOf } from '../base/errors.ts';
import { sysctlFile } from '../host/limits.ts';

export interface NetworkOptions {
  paths: WorkerPaths;
  nodeName: string;
  /** The worker's API client, with the kubelet's credentials. */
  kube: KubeClient;
  /** The cluster's pod CIDR (all nodes): pod traffic inside it keeps its source address. */
  clusterCIDR: string;
  /** The controllers' hosts as the join token names them (API servers, konnectivity servers): no node's address. */
  controllers: string[];
  /** In wireguard mode, relay traffic between nodes that cannot reach each other (kctl worker --network-relay). */
  relay?: boolean;
  /** The way to the controllers' relay (the konnectivity agent), for spec.network.relay: controllers. */
  datagrams?: DatagramLink;
  /**
   * How often routes are re-checked against the watched Nodes without a change (repairs routes
   * removed by hand, retries a failed sync, moves a silent WireGuard peer to a relay). Default 10 s.
   */
  syncIntervalMs?: number;
  /** Watch tuning (tests). */
  watch?: ListWatchOptions;
}

interface KubeConfigMap {
  metadata: { name: string; namespace?: string };
  data?: Record<string, string>;
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
  /** The cluster's pod network mode (kube/pod-network.ts). */
  private podNetworks?: Informer<KubeConfigMap>;
  /** Why the mode could not be listed (an older controller has no rule for nodes to read it). */
  private podNetworkError?: string;
  /** The mode the last sync applied. */
  private applied?: PodNetwork;
  private overlay?: Overlay;
  /** The pods' MTU the last sync set. */
  private mtu?: number;
  /** Wakes ready() when the watch brings a change or an error. */
  private changed: () => void = () => undefined;
  private lastWatchError?: string;
  /** Set once the CNI config is written: from then on every Node change reroutes. */
  private routing = false;
  private syncing?: Promise<void>;
  private dirty = false;
  private podCIDR?: string;
  private lastSyncError?: string;
  /** The pod ranges the last sync refused, and their warn line's key. */
  private refused: RefusedPodRange[] = [];
  private refusedPeers: RefusedPeer[] = [];
  private refusedKey = '';
  /** The live controllers' hosts, from their leases (controllersChanged). */
  private liveControllers = new Set<string>();

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
    const watch = { ...NODE_WATCH, ...this.opts.watch };
    this.nodes ??= this.watch<KubeNode>('/api/v1/nodes', watch, (e) => (this.lastWatchError = e));
    this.podNetworks ??= this.watch<KubeConfigMap>(
      POD_NETWORK_COLLECTION,
      { ...watch, fieldSelector: `metadata.name=${POD_NETWORK_NAME}` },
      (e) => (this.podNetworkError = e),
    );
    this.nodes.start();
    this.podNetworks.start();
  }

  /** A watch whose changes wake ready() and, once routing, sync; `setError` keeps its last error (cleared by a change). */
  private watch<T extends WatchedObject>(
    path: string,
    opts: ListWatchOptions,
    setError: (reason: string | undefined) => void,
  ): Informer<T> {
    const informer = new Informer<T>(
      this.opts.kube,
      path,
      opts,
      () => {
        setError(undefined);
        this.changed();
        if (this.routing) void this.sync();
      },
      (err) => {
        setError(reasonOf(err));
        this.changed();
      },
    );
    return informer;
  }

  /** The mode the cluster publishes; without one (a cluster from before modes), routes. A damaged one keeps what runs. */
  private podNetwork(): PodNetwork {
    const cm = this.podNetworks?.store.values().next().value;
    if (!cm) return LEGACY_POD_NETWORK;
    try {
      return parsePodNetwork(cm.data);
    } catch (err) {
      if (!this.applied) throw err;
      this.log.warn(`${reasonOf(err)}; keeping mode ${this.applied.mode}`);
      return this.applied;
    }
  }

  async ready(signal: AbortSignal): Promise<void> {
    const { nodeName } = this.opts;
    const log = this.log;
    for (;;) {
      const self = this.nodes?.get(nodeName);
      // The mode is known once listed, or when listing it fails (then the cluster's controllers
      // predate modes, and nodes keep routes).
      const modeKnown = this.podNetworks?.hasSynced || this.podNetworkError !== undefined;
      if (self?.spec?.podCIDR && modeKnown) {
        this.podCIDR = self.spec.podCIDR;
        break;
      }
      if (signal.aborted) {
        const why =
          this.lastWatchError ??
          (!this.nodes?.hasSynced
            ? 'Nodes not listed yet'
            : !modeKnown
              ? `the pod network mode is not known yet (${POD_NETWORK_NAME} not listed)`
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
    await execa('modprobe', ['br_netfilter'], { reject: false, extendEnv: false, env: SYSTEM_PATH_ENV });
    await setSysctl('net.bridge.bridge-nf-call-iptables', '1', log);
    if (!this.podNetworks?.hasSynced)
      log.warn(`cannot read the pod network mode (${this.podNetworkError}); using routes`);
    await ensureMasquerade(this.podCIDR, this.opts.clusterCIDR, log);
    this.routing = true;
    await this.sync();
    this.timer = setInterval(() => {
      void this.sync();
    }, this.opts.syncIntervalMs ?? 10_000);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    this.routing = false;
    await this.nodes?.stop();
    await this.podNetworks?.stop();
    await this.syncing;
    await this.overlay?.stop();
  }

  /** The mode and the peers, for `kctl status`. */
  /** A datagram another node sent through the controllers (controller-relay.ts). */
  datagram(fromNode: string, data: Buffer): void {
    this.overlay?.deliver(fromNode, data);
  }

  async snapshot(): Promise<PodNetworkStatus | undefined> {
    const status = await this.overlay?.status(this.believedNodes(this.applied ?? this.podNetwork()), this.mtu);
    if (!status) return undefined;
    return {
      ...status,
      ...(this.refused.length ? { refusedRanges: this.refused } : {}),
      ...(this.refusedPeers.length ? { refusedPeers: this.refusedPeers } : {}),
    };
  }

  /** The live controllers changed (their leases): their addresses are no node's. */
  controllersChanged(live: LiveController[]): void {
    this.liveControllers = new Set(live.flatMap(controllerHosts));
  }

  /**
   * What no node's pod range or address may be, as this node knows it: the cluster's shape as the
   * controllers publish it (else, from a controller from before it was published, the join
   * token's cluster CIDR), and the controllers' addresses (the join token's and the live ones).
   */
  private reserved(net: PodNetwork): ReservedSpace {
    const controllers = new Set(
      [...this.opts.controllers, ...this.liveControllers].map((h) =>
        canonicalIdentifier(h.includes('://') ? urlHost(h) : h),
      ),
    );
    return {
      isController: (v) => controllers.has(v),
      serviceCIDRs: net.ranges ? [net.ranges.serviceCIDR] : [],
      podCIDRs: [net.ranges?.clusterCIDR ?? this.opts.clusterCIDR],
      podRangeBits: net.ranges?.nodeBits,
    };
  }

  /** The watched Nodes as the ownership rule lets this node believe them (overlay.ts routableNodes); what it refuses is said once. */
  private believedNodes(net: PodNetwork): NodeInfo[] {
    const { nodes, refused, refusedPeers } = routableNodes(
      [...(this.nodes?.store.values() ?? [])],
      this.opts.nodeName,
      this.reserved(net),
    );
    this.refused = refused;
    this.refusedPeers = refusedPeers;
    const key = JSON.stringify([refused, refusedPeers]);
    if (key !== this.refusedKey) {
      this.refusedKey = key;
      for (const r of refused)
        this.log.warn(
          { node: r.node, podCIDR: r.range },
          `pod range ${r.range} of node ${r.node} is not routed: ${r.reason}`,
        );
      for (const r of refusedPeers)
        this.log.warn({ node: r.node }, `node ${r.node}: its ${r.what} is not believed: ${r.reason}`);
    }
    return nodes;
  }

  /** A problem while running (routes, the Node watch); failures to start are the manager's to report. */
  status(): Partial<ComponentStatus> {
    return { lastError: this.routing ? (this.lastSyncError ?? this.lastWatchError) : undefined };
  }

  /** The CNI config for this node's podCIDR, with the pods' MTU when the mode needs one (rewritten on a change). */
  private async writeCniConfig(podCIDR: string, mtu: number | undefined): Promise<void> {
    if (
      await writeIfChanged(
        this.conflistPath,
        JSON.stringify(cniConflist(podCIDR, this.opts.paths, mtu), null, 2) + '\n',
      )
    ) {
      this.log.info({ podCIDR, mtu, file: this.conflistPath }, 'wrote CNI config');
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
      const net = this.podNetwork();
      const nodes = this.believedNodes(net);
      const self = nodes.find((n) => n.name === nodeName);
      if (self?.podCIDR && this.podCIDR && self.podCIDR !== this.podCIDR) {
        log.warn(
          { was: this.podCIDR, now: self.podCIDR },
          'podCIDR of this node changed; rewriting the CNI config (running pods keep their old addresses)',
        );
        this.podCIDR = self.podCIDR;
        await ensureMasquerade(this.podCIDR, this.opts.clusterCIDR, log);
      }
      const podCIDR = this.podCIDR!;
      this.overlay ??= new Overlay(
        this.opts.paths,
        nodeName,
        this.opts.kube,
        log,
        this.opts.relay ? { clusterCIDR: this.opts.clusterCIDR } : undefined,
        this.opts.datagrams ? new ControllerRelay(this.opts.datagrams, log) : undefined,
      );
      const { mtu, errors } = await this.overlay.apply(net, nodes, podCIDR);
      if (this.applied?.mode !== net.mode)
        log.info(
          {
            mode: net.mode,
            mtu,
            ...(net.mode === 'vxlan' ? net.vxlan : net.mode === 'wireguard' ? net.wireguard : {}),
          },
          `pod network mode ${net.mode}`,
        );
      this.applied = net;
      this.mtu = mtu;
      await this.writeCniConfig(podCIDR, mtu);
      errors.push(...(await syncPodRoutes(desiredRoutes(nodes, nodeName, net.mode), log)));
      if (errors.length) throw new Error(errors.join('; '));
      this.lastSyncError = undefined;
    } catch (err) {
      const reason = reasonOf(err);
      if (reason !== this.lastSyncError) log.warn(`route sync failed: ${reason}`);
      this.lastSyncError = reason;
    }
  }
}

/** For `kctl reset`: removes kctl's routes, the VXLAN device and filter, the policy table, the CNI config and IPAM state, and the bridge. */
export async function cleanupNetwork(paths: WorkerPaths): Promise<void> {
  await removePodRoutes();
  await rm(join(paths.cniConfDir, CNI_CONFLIST), { force: true });
  await rm(paths.cniStateDir, { recursive: true, force: true });
  await ip(['link', 'del', CNI_BRIDGE]).catch(() => undefined);
  await removeVxlan();
  await removePodToNodeRoutes();
  await cleanupNetworkPolicy();
}
