// `kctl worker`: a node as an ordered list of components (k0s's shape), built by workerComponents().
//   join, stage (before the list), then: status socket -> api-balancer -> containerd -> images
//   -> kubelet-profile -> kubelet -> network -> kube-proxy -> konnectivity agent (in-process,
//   dials out to every controller) -> controller-watch (the live controllers, for the balancer,
//   the agent and the node's upgrade) -> ca-trust -> node-upgrade
import { execa } from 'execa';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { splitHostPort, urlHost } from '../base/addresses.ts';
import { UserError } from '../base/errors.ts';
import { proxySettingProblem } from '../base/proxy.ts';
import { runUntilSignal } from '../base/lifecycle.ts';
import { KubeClient } from '../kube/client.ts';
import type { CertificateStatus } from '../pki/index.ts';
import { API_BALANCER_PORT, API_BALANCER_URL, ApiBalancerComponent, type ApiBalancerStatus } from './api-balancer.ts';
import { componentLogger, type Logger } from '../base/log.ts';
import { stage, stageForStart } from '../payload/stage-child.ts';
import { runningRelease } from '../payload/payload.ts';
import { NodeUpgradeComponent } from './upgrade.ts';
import { writeOutcome } from '../payload/upgrade-files.ts';
import { RestartRequest, restartForUpgrade } from '../supervisor/handover.ts';
import { pollUntil } from '../base/probe.ts';
import { parseMemberUpgrade, UPGRADE_ANNOTATION } from '../kube/upgrade-plan.ts';
import { isNodeReady, nodePath, type NodeConditions } from '../kube/nodes.ts';
import { readyAtVersion, StatusServerComponent, type StatusReport } from '../base/status-server.ts';
import type { Component } from '../base/component.ts';
import { ComponentManager } from '../base/manager.ts';
import { ownPids, requireHost } from '../host/checks.ts';
import { raiseKernelLimits } from '../host/limits.ts';
import { migrateDataDir, refuseNewerDataDir } from '../host/data-format.ts';
import { SystemdNotifier } from '../supervisor/notify.ts';
import { refuseIfOwned, runOwning } from '../supervisor/owner.ts';
import { prepareRunDir } from '../supervisor/run-dir.ts';
import { writeFileAtomic } from '../base/fs.ts';
import { KCTL_VERSION, refuseTestBuildStart, type Release } from '../base/version.ts';
import { AgentComponent } from './agent.ts';
import type { AgentSnapshot } from '../konnectivity/index.ts';
import { ContainerdComponent } from './containerd.ts';
import { ControllerWatchComponent } from './controller-watch.ts';
import { ImagesComponent } from './images.ts';
import { CaTrustComponent } from './ca-trust.ts';
import { join as joinCluster, pointKubeconfigsAt, type JoinState } from './join.ts';
import { KUBE_PROXY_HEALTHZ_PORT, KUBE_PROXY_METRICS_PORT, KubeProxyComponent } from './kube-proxy.ts';
import { KUBELET_PORT, KubeletComponent } from './kubelet.ts';
import { KubeletProfileComponent, type KubeletProfileStatus } from './kubelet-profile.ts';
import type { KubeletValues } from '../kube/worker-profiles.ts';
import { NetworkComponent } from './network.ts';
import { NodeLocalApiComponent } from './node-local-api.ts';
import { NetworkPolicyComponent, type NetworkPolicyStatus } from './network-policy.ts';
import type { PodNetworkStatus } from './overlay.ts';
import { workerPaths, type WorkerPaths } from './paths.ts';

export interface WorkerOptions {
  token?: string;
  dataDir: string;
  runDir: string;
  nodeName?: string;
  nodeIp?: string;
  labels: Record<string, string>;
  taints: string[];
  /** Relay WireGuard traffic between nodes behind NAT (wireguard mode). */
  networkRelay?: boolean;
  /** The worker profile (spec.workerProfiles) whose kubelet settings this node runs; none: `default` if defined. */
  profile?: string;
}

export interface WorkerStatusReport extends StatusReport {
  role: 'worker';
  /** The node-local API balancer: its upstreams and their health. */
  apiBalancer?: ApiBalancerStatus;
  /** The node's CA and kubelet's client and serving certificates (kubelet renews them): expiry, next renewal, renewals seen. */
  certificates?: CertificateStatus[];
  /** The konnectivity agent: the servers (controllers) it holds a stream to, and its connections on each. */
  konnectivityAgent?: AgentSnapshot;
  /** The pod network's mode and this node's peers (in wireguard mode with handshake age and bytes). */
  podNetwork?: PodNetworkStatus;
  /** NetworkPolicy on this node: the nftables table in place, how many pods it isolates. */
  networkPolicy?: NetworkPolicyStatus;
  /** The worker profile kubelet runs with. */
  kubeletProfile?: KubeletProfileStatus;
}

/** What reset needs to know about this worker after it stopped. */
export interface WorkerIdentity {
  nodeName: string;
  nodeIp: string;
}

export function identityFile(paths: WorkerPaths): string {
  return join(paths.dataDir, 'worker.json');
}

/** The address this host uses towards the API server: what kubelet would pick too. */
export async function routeSource(url: string): Promise<string> {
  const host = urlHost(url);
  const r = await execa('ip', ['route', 'get', host], { reject: false });
  const m = /\bsrc (\S+)/.exec(r.stdout);
  if (!m)
    throw new UserError(
      `cannot tell this host's address towards ${host} (${r.stderr.trim() || 'no route'}); pass --node-ip`,
    );
  return m[1]!;
}

/** The ports a worker listens on, by what uses them (kctl sysinfo checks they are free). */
export const WORKER_PORTS: Record<string, number> = {
  'API balancer': API_BALANCER_PORT,
  kubelet: KUBELET_PORT,
  'kube-proxy healthz': KUBE_PROXY_HEALTHZ_PORT,
  'kube-proxy metrics': KUBE_PROXY_METRICS_PORT,
};

export async function runWorker(opts: WorkerOptions, log: Logger): Promise<void> {
  // Under a Type=notify unit (kctl install): progress, readiness and watchdog pings for systemd.
  const notifier = SystemdNotifier.forRole({ log: componentLogger(log, 'systemd') });
  refuseTestBuildStart(); // its config is the token, read by now
  const proxyProblem = proxySettingProblem();
  if (proxyProblem) throw new UserError(proxyProblem);
  const paths = workerPaths(opts.dataDir, opts.runDir);
  await refuseIfOwned([paths.dataDir, paths.runDir]); // before the join writes anything
  await refuseNewerDataDir(paths.dataDir, KCTL_VERSION);
  // Validates the token against the cluster, then the host, before anything is written.
  const state = await joinCluster(opts.token, paths, componentLogger(log, 'join'), async () => {
    await requireHost({
      role: 'worker',
      dataDir: paths.dataDir,
      ports: WORKER_PORTS,
      ownPids: await ownPids(paths.runDir),
    });
  });
  await prepareRunDir(paths.runDir);
  // Marks the data and run dirs as in use, for `kctl reset` and for a second start.
  const restart = new RestartRequest();
  let kube: KubeClient | undefined;
  await runOwning(
    [paths.dataDir, paths.runDir],
    'worker',
    async () => void (kube = await stageAndRun(opts, paths, state, log, notifier, restart)),
  );
  // An upgrade stopped everything to restart into the new kctl (containers keep running meanwhile).
  if (restart.pending && kube) {
    const { target } = restart.pending;
    const nodeName = (await readIdentity(paths))!.nodeName;
    await restartForUpgrade(restart.pending, {
      log: componentLogger(log, 'upgrade'),
      ready: (signal) => nodeReadyAt(kube!, nodeName, paths.statusSocket, target, signal),
      systemd: SystemdNotifier.fromEnv({ log: componentLogger(log, 'systemd') }),
      onRollback: (reason) =>
        writeOutcome(paths.dataDir, { target, state: 'rolled back', reason, at: new Date().toISOString() }),
    });
  }
}

/** The new process runs `target` with every component running, and says on its Node that it is done (it is Ready). */
async function nodeReadyAt(
  kube: KubeClient,
  nodeName: string,
  socket: string,
  target: string,
  signal: AbortSignal,
): Promise<void> {
  await readyAtVersion(socket, target, signal);
  type Node = { metadata: { annotations?: Record<string, string> } };
  await pollUntil(
    signal,
    `node ${nodeName} Ready at kctl ${target}`,
    async () => {
      const n = await kube.get<Node>(nodePath(nodeName));
      const u = parseMemberUpgrade(n.metadata.annotations?.[UPGRADE_ANNOTATION]);
      if (u?.target !== target || u.state !== 'done')
        throw new Error(`the node says ${u ? `${u.state} (${u.target})` : 'nothing'}`);
    },
    1_000,
  );
}

/** Runs the worker until it stops; returns its API client (an upgrade's restart uses it to see the new process ready). */
async function stageAndRun(
  opts: WorkerOptions,
  paths: WorkerPaths,
  state: JoinState,
  log: Logger,
  notifier: SystemdNotifier | undefined,
  restart: RestartRequest,
): Promise<KubeClient> {
  notifier?.status('staging component binaries and images');
  await migrateDataDir(paths.dataDir, KCTL_VERSION, componentLogger(log, 'data-dir'));
  await stageForStart(paths.binRoot, ['worker'], componentLogger(log, 'stage'));
  await stage({ kind: 'images', dir: paths.imagesDir }, componentLogger(log, 'stage'));
  await raiseKernelLimits(componentLogger(log, 'host'));

  const id: WorkerIdentity = {
    nodeName: opts.nodeName ?? hostname().toLowerCase(),
    nodeIp: opts.nodeIp ?? (await routeSource(state.apiServers[0]!)),
  };
  await writeFileAtomic(identityFile(paths), JSON.stringify(id) + '\n', 0o644);
  // The worker's one API client, as the node itself: the kubeconfig kubelet writes after TLS bootstrap,
  // read per connection because kubelet rotates its client certificate.
  const kube = KubeClient.fromKubeconfig(paths.kubeletKubeconfig, { reload: true });
  await pointKubeconfigsAt(paths, API_BALANCER_URL);
  const manager = new ComponentManager(
    workerComponents({
      opts,
      paths,
      state,
      id,
      kube,
      restart,
      release: await runningRelease(),
    }),
    componentLogger(log, 'manager'),
    {
      onProgress: (text) => notifier?.status(text),
    },
  );
  const stopRequested = () => manager.stopRequested;
  log.info({ node: id.nodeName, nodeIp: id.nodeIp, apiServer: state.apiServers[0] }, 'starting worker');
  await runUntilSignal(manager, log, {
    // Ready means the node is Ready: what `systemctl start` waits for.
    onReady: async () => {
      notifier?.status(`waiting for node ${id.nodeName} to be Ready`);
      if (!(await waitNodeReady(kube, id.nodeName, stopRequested))) return;
      log.info({ node: id.nodeName }, 'worker ready');
      notifier?.ready(`worker ready: node ${id.nodeName} is Ready`);
    },
    onStopping: () => notifier?.stopping(),
    stopWhen: restart.requested,
    onStopped: async () => {
      log.info('worker stopped; containers keep running until the next start or kctl reset');
      await notifier?.close();
    },
  });
  return kube;
}

/** Everything a worker's list of components is built from. */
export interface WorkerRoleOptions {
  opts: WorkerOptions;
  paths: WorkerPaths;
  state: JoinState;
  id: WorkerIdentity;
  /** The node's API client (through the balancer). */
  kube: KubeClient;
  /** The release this worker runs (named on its Node). */
  release: Release;
  /** Where an upgrade asks for the restart into a new executable. */
  restart: RestartRequest;
}

/**
 * The worker's components in start order, the status socket first so `kctl status` shows
 * progress while the rest come up. The controller watch is handed what follows the live
 * controllers: the API balancer's upstreams and the agent's servers.
 */
export function workerComponents(o: WorkerRoleOptions): Component[] {
  const { opts, paths, state, id, kube } = o;
  // The cluster's pod CIDR from the join token (tokens from before it was carried: the default).
  const clusterCIDR = state.podCIDR ?? '10.244.0.0/16';
  // Everything on the node reaches the API through 127.0.0.1:7443, over every live controller.
  // Pod network datagrams through the controllers go out and come in over the agent's streams.
  const agent = new AgentComponent(paths, state, id, (fromNode, data) => network.datagram(fromNode, data));
  // After a partition the balancer's check is the first to see a controller again; the agent,
  // perhaps deep in its backoff, hears of it and dials that controller's konnectivity port.
  const balancer = new ApiBalancerComponent({
    caFile: paths.caCert,
    // The token's controller through its front door when the token names one.
    apiServers: state.apiServers.map((url, i) => ({
      url,
      ...(i === 0 && state.frontDoor ? { door: state.frontDoor } : {}),
    })),
    nodeCertFile: paths.kubeletClientPem,
    onHealthy: (host) => agent.hostAnswers(host),
  });
  const kubelet = new KubeletComponent({
    paths,
    nodeName: id.nodeName,
    nodeIp: id.nodeIp,
    labels: opts.labels,
    taints: opts.taints,
    clusterDomain: state.clusterDomain,
    clusterDNS: state.clusterDNS ? [state.clusterDNS] : undefined,
    profile: (): KubeletValues | undefined => kubeletProfile.values(),
  });
  const kubeletProfile: KubeletProfileComponent = new KubeletProfileComponent({
    name: opts.profile,
    paths,
    kube,
    kubelet,
  });
  const kubeProxy = new KubeProxyComponent({ paths, nodeName: id.nodeName, clusterCIDR });
  const network = new NetworkComponent({
    paths,
    nodeName: id.nodeName,
    kube,
    clusterCIDR,
    controllers: [...state.apiServers, ...state.konnectivity.map((k) => splitHostPort(k)?.host ?? k)],
    relay: opts.networkRelay,
    datagrams: { send: (toNode, data) => agent.sendDatagram(toNode, data) },
  });
  const networkPolicy = new NetworkPolicyComponent({ nodeName: id.nodeName, kube });
  const nodeLocal = new NodeLocalApiComponent(balancer);
  const upgrade = new NodeUpgradeComponent({
    kube,
    nodeName: id.nodeName,
    release: o.release,
    dataDir: paths.dataDir,
    binRoot: paths.binRoot,
    caCert: paths.caCert,
    clientPem: paths.kubeletClientPem,
    restart: o.restart,
  });
  const status = new StatusServerComponent<WorkerStatusReport>(paths.statusSocket, async (components) => ({
    role: 'worker',
    version: KCTL_VERSION,
    pid: process.pid,
    uptimeSeconds: Math.round(process.uptime()),
    components,
    apiBalancer: balancer.snapshot(),
    certificates: agent.certificates(),
    konnectivityAgent: agent.snapshot(),
    podNetwork: await network.snapshot(),
    networkPolicy: networkPolicy.snapshot(),
    kubeletProfile: kubeletProfile.snapshot(),
  }));
  return [
    status,
    balancer,
    new ContainerdComponent({ paths }),
    new ImagesComponent({ paths }),
    kubeletProfile,
    kubelet,
    network,
    networkPolicy,
    kubeProxy,
    agent,
    nodeLocal,
    // The token's controllers to start with; from then on their leases say which are alive.
    new ControllerWatchComponent(kube, [balancer, agent, upgrade, network, nodeLocal]),
    new CaTrustComponent({ paths, kube, nodeName: id.nodeName, restart: [kubelet, kubeProxy], agent }),
    // Names the release on the Node and follows the upgrade plan: this node's turn, its restart.
    upgrade,
  ];
}

/** Polls the node's Ready condition until it is True (true) or a stop was requested (false). */
async function waitNodeReady(kube: KubeClient, nodeName: string, stopRequested: () => boolean): Promise<boolean> {
  while (!stopRequested()) {
    if (isNodeReady(await kube.get<NodeConditions>(nodePath(nodeName)).catch(() => undefined))) return true;
    await sleep(1000);
  }
  return false;
}

export async function readIdentity(paths: WorkerPaths): Promise<WorkerIdentity | null> {
  if (!existsSync(identityFile(paths))) return null;
  return JSON.parse(await readFile(identityFile(paths), 'utf8')) as WorkerIdentity;
}
