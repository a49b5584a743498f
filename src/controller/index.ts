// `kctl controller`: the control plane as an ordered list of components (k0s's shape), built by
// controllerComponents(): the full profile's list and the api-only profile's (the Kubernetes API for
// CRDs and operators, no nodes) read in start order there, status socket first, front door last.
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { writeFileAtomic } from '../base/fs.ts';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { componentLogger, type Logger } from '../base/log.ts';
import { stageForStart } from '../payload/stage-child.ts';
import { runningRelease } from '../payload/payload.ts';
import { ensurePki, type PkiPaths } from '../pki/index.ts';
import { sharedPkiFilesFor } from '../pki/paths.ts';
import { messageOf, UserError } from '../base/errors.ts';
import type { Component } from '../base/component.ts';
import { httpsUrl } from '../base/addresses.ts';
import { runUntilSignal } from '../base/lifecycle.ts';
import { readyAtVersion, StatusServerComponent } from '../base/status-server.ts';
import { ComponentManager } from '../base/manager.ts';
import { KCTL_VERSION, refuseTestBuildStart, type Release } from '../base/version.ts';
import { ownPids, requireHost } from '../host/checks.ts';
import { raiseKernelLimits } from '../host/limits.ts';
import { boostStart } from '../host/priority.ts';
import { migrateDataDir, refuseNewerDataDir } from '../host/data-format.ts';
import { SystemdNotifier } from '../supervisor/notify.ts';
import { refuseIfOwned, runOwning } from '../supervisor/owner.ts';
import { prepareRunDir } from '../supervisor/run-dir.ts';
import { ensurePostgresDatabase, isPostgres } from '../etcd/postgres.ts';
import { startTenant, tenantPortAdvice, undoNewTenant, type TenantLayout } from './tenants/tenants.ts';
import { writeAddonStacks } from './cluster/addons.ts';
import { checkAuditPolicy, prepareAudit } from './encryption/audit.ts';
import { CorednsScalerComponent } from './cluster/coredns-scaler.ts';
import { ApiserverComponent } from './components/apiserver.ts';
import { BootstrapComponent, publishClusterInfo } from './cluster/bootstrap.ts';
import { KonnectivityServerComponent } from './components/konnectivity.ts';
import { NetworkPolicyPublisherComponent } from './cluster/network-policy.ts';
import { CsrApproverComponent } from './join/csr-approver.ts';
import { ControllerLeaseComponent, LiveControllers } from './leases/lease.ts';
import { EncryptionComponent } from './encryption/encryption.ts';
import { joinController, leftMarker, type ControllerJoinState } from './join/join.ts';
import { adoptSharedPki } from './pki/shared-pki.ts';
import { JoinServerComponent } from './join/join-server.ts';
import { frontDoorComponent, type FrontDoorComponent } from './components/front-door.ts';
import { ExecutableFiles } from './upgrades/executables.ts';
import { ControllerUpgradeComponent } from './upgrades/upgrade.ts';
import { writeOutcome } from '../payload/upgrade-files.ts';
import { RestartRequest, restartForUpgrade } from '../supervisor/handover.ts';
import { ManifestApplierComponent } from './cluster/manifests.ts';
import { reservedSpace } from './cluster/reserved.ts';
import { KubeletServingCheckComponent } from './nodes/kubelet-serving.ts';
import { BackupSchedulerComponent } from './backups/backup-schedule.ts';
import { NodeWatchComponent } from './nodes/nodes.ts';
import { KubeClient } from '../kube/client.ts';
import { agentServers, memberLeaseName } from '../kube/controller-leases.ts';
import { NodeLeaseAccessComponent } from './cluster/node-lease-access.ts';
import { kubernetesEndpointsComponents } from './cluster/kubernetes-endpoints.ts';
import { loadConfig, type ClusterConfig, type ConfigFlags } from './config/config.ts';
import { PkiRenewerComponent, pkiOptions } from './pki/pki-renewer.ts';
import { LeaseTurn } from './pki/pki-turn.ts';
import { controllerPaths, type ControllerPaths } from './config/paths.ts';
import { ControllerManagerComponent } from './components/controller-manager.ts';
import { SchedulerComponent } from './components/scheduler.ts';
import { controllerPorts } from './components/ports.ts';
import { processReport, type ControllerStatusReport } from './leases/status.ts';
import { localEtcd, storageComponent, storageStatus } from './components/storage.ts';

export interface ControllerOptions extends ConfigFlags {
  configFile?: string;
  /** A controller join token (kctl token create --role controller): join a running cluster. */
  token?: string;
  dataDir: string;
  runDir: string;
  initOnly?: boolean;
  /** kctl controller --shared-pki: the cluster's CAs and keys from this directory (a mounted Secret; pki/shared-pki.ts). */
  sharedPki?: string;
  /** kctl controller --member-name: its name among the cluster's controllers, where they share one address (pods). */
  memberName?: string;
  /** kctl controller --name: a tenant in its own dirs (dataDir, runDir are the tenant's), ports from portRange. */
  tenant?: TenantLayout & { portRange: [number, number] };
}

/** Everything a controller's list of components is built from. */
export interface ControllerRoleOptions {
  cfg: ClusterConfig;
  paths: ControllerPaths;
  pki: PkiPaths;
  /** Set when this controller joined a running cluster: its etcd member joins theirs. */
  joined?: ControllerJoinState | null;
  /** The release this controller runs (its lease names it). */
  release: Release;
  /** Where an upgrade asks for the restart into a new executable; no upgrades without it. */
  restart?: RestartRequest;
  /** The CAs and keys came from --shared-pki: no controller joins this one. */
  sharedPki?: boolean;
  /** Its name among the cluster's controllers (--member-name); default from spec.api.address. */
  member?: string;
}

/**
 * The controller's components in start order, the status socket first so `kctl status` shows
 * progress while the rest come up. Components that talk are handed each other here: the live
 * controllers (made first) to the konnectivity server, the reserved space and the lease; the
 * konnectivity server's agents to the lease; the node watch to whatever judges nodes.
 */
export function controllerComponents(o: ControllerRoleOptions): Component[] {
  const { cfg, paths, pki } = o;
  // The one API client of this process, shared by every component (admin.conf read per request: renewals apply at once).
  const kube = KubeClient.fromKubeconfig(pki.adminConf, { reload: true });
  const storage = storageComponent(cfg, paths, pki, o.joined ?? null);
  // This controller among the others: its lease, its turn in upgrades and renewals, the backup lease's holder.
  const self = memberLeaseName(cfg.spec.api.address, o.member);
  // Scheduled backups: on every controller, made by the one holding the backup lease. The front door: once all listen.
  const backups = cfg.spec.backup.schedule
    ? new BackupSchedulerComponent({ cfg, paths, kube, identity: self })
    : undefined;
  const last = (door: FrontDoorComponent | undefined) => [backups, door].filter((c) => c !== undefined);
  if (cfg.spec.profile === 'api-only') {
    const controllerManager = new ControllerManagerComponent(cfg, paths, pki);
    // No nodes: nothing to publish the CA bundle to.
    const renewer = new PkiRenewerComponent(pkiOptions(cfg, paths), pki, { controllerManager, caRotation: { kube } });
    const door = frontDoorComponent(cfg, paths);
    const status = new StatusServerComponent<ControllerStatusReport>(paths.statusSocket, async (components) => ({
      ...processReport(components),
      storage: await storageStatus(cfg, pki),
      backup: backups?.report(),
      certificates: renewer.certificates(),
      frontDoor: door?.report(),
    }));
    return [
      status,
      storage,
      new EncryptionComponent(cfg, pki, kube),
      new ApiserverComponent(cfg, paths, pki, { egress: false }),
      // Operators' stacks under <data-dir>/manifests/<stack>/ (CRDs, RBAC): kctl writes no add-ons here.
      new ManifestApplierComponent(paths.manifestsDir, paths.dataDir, kube),
      controllerManager,
      ...last(door),
      renewer,
    ];
  }
  // Every live controller, as their leases say: the konnectivity server count follows them, and
  // no node may own their addresses.
  const controllers = new LiveControllers(self, kube);
  // One watch of Nodes: agent claims and serving CSRs are judged against it with the same rule,
  // which keeps every controller's addresses and the cluster's virtual networks from any node.
  const reserved = reservedSpace(cfg, { certificates: [pki.serverCert, pki.konnectivityCert], controllers });
  const nodes = new NodeWatchComponent(kube, reserved);
  const konnectivity = new KonnectivityServerComponent(cfg, paths, pki, kube, nodes, controllers);
  const encryption = new EncryptionComponent(cfg, pki, kube);
  // This controller's lease lists the agents its konnectivity server holds, so every controller's status shows each agent's servers,
  // and the encryption keys its kube-apiserver has loaded, which kctl secrets rotate-key waits on.
  const servingCheck = new KubeletServingCheckComponent(pki, paths.konnectivitySocket, nodes);
  const joinServer = new JoinServerComponent(
    cfg,
    pki,
    kube,
    cfg.spec.storage.type === 'etcd' ? localEtcd(cfg, pki) : undefined,
    new ExecutableFiles(paths.dataDir),
    o.sharedPki,
  );
  const scheduler = new SchedulerComponent(cfg, paths, pki);
  const controllerManager = new ControllerManagerComponent(cfg, paths, pki);
  const renewer = new PkiRenewerComponent(
    pkiOptions(cfg, paths),
    pki,
    {
      konnectivity,
      joinServer,
      scheduler,
      controllerManager,
      addons: (log) => writeAddonStacks(cfg, paths.manifestsDir, pki, log),
      caRotation: { kube, publishCa: (caPem) => publishClusterInfo(kube, cfg, caPem, pki) },
    },
    new LeaseTurn(kube, self),
  );
  const door = frontDoorComponent(cfg, paths, { konnectivity, join: joinServer, pki });
  const upgrade = o.restart
    ? new ControllerUpgradeComponent({
        cfg,
        paths,
        pki,
        kube,
        release: o.release,
        controllers,
        restart: o.restart,
        agents: konnectivity,
      })
    : undefined;
  const lease = new ControllerLeaseComponent({
    cfg,
    kube,
    controllers,
    agents: konnectivity,
    encryption,
    caBundle: renewer,
    release: o.release,
    upgrade,
  });
  const status = new StatusServerComponent<ControllerStatusReport>(paths.statusSocket, async (components) => {
    const live = controllers.liveControllers();
    return {
      ...processReport(components),
      konnectivity: konnectivity.snapshot(),
      controllers: live,
      agentServers: agentServers(live),
      storage: await storageStatus(cfg, pki),
      nodes: nodes.counts(),
      addressConflicts: nodes.conflicts(),
      refusedPodRanges: nodes.refusedPodRanges(),
      kubeletServing: servingCheck.report(),
      backup: backups?.report(),
      certificates: renewer.certificates(),
      pkiRenewals: renewer.renewals(),
      frontDoor: door?.report(),
    };
  });
  return [
    status,
    storage,
    konnectivity, // before kube-apiserver: its egress selector dials this server's unix socket
    // Before kube-apiserver, which is ready only once it can read Secrets: this fetches the cluster's keys meanwhile.
    encryption,
    new ApiserverComponent(cfg, paths, pki, { egress: true }),
    nodes,
    // Cluster objects; and kube-system's leases stay readable for nodes while one of an older kctl remains.
    new BootstrapComponent(cfg, pki, kube),
    new NodeLeaseAccessComponent(kube, nodes),
    ...kubernetesEndpointsComponents(cfg, { kube, nodes, controllers }),
    lease,
    joinServer, // other controllers join through this one (kctl controller --token-file)
    // kctl's add-on stacks (written before the start) and operators' stacks under <data-dir>/manifests/<stack>/.
    new ManifestApplierComponent(paths.manifestsDir, paths.dataDir, kube),
    ...(cfg.spec.addons.coredns.enabled
      ? [new CorednsScalerComponent(kube, nodes, cfg.spec.addons.coredns.replicas)]
      : []),
    scheduler,
    controllerManager,
    new CsrApproverComponent(kube, nodes),
    new NetworkPolicyPublisherComponent(kube),
    // Which CA each kubelet's serving certificate comes from, while an older cluster's nodes move over.
    servingCheck,
    ...last(door),
    // Renews leaf certificates and kubeconfigs while the controller runs, and has them picked up.
    renewer,
    // Follows the upgrade plan: this controller's turn, its restart into the target.
    ...(upgrade ? [upgrade] : []),
  ];
}

/** Prepares the data dir; with initOnly, exits after; otherwise runs until SIGTERM/SIGINT. */
export async function runController(opts: ControllerOptions, log: Logger): Promise<void> {
  // Under a Type=notify unit (kctl install): progress, readiness and watchdog pings for systemd.
  const notifier = opts.initOnly ? undefined : SystemdNotifier.forRole({ log: componentLogger(log, 'systemd') });
  let cfg = await loadConfig(opts.configFile, { ...opts, tenantName: opts.tenant?.name });
  refuseTestBuildStart();
  const paths = controllerPaths(opts.dataDir, opts.runDir, opts.tenant?.binRoot);
  if (existsSync(leftMarker(paths)))
    throw new UserError(
      `this controller left the etcd cluster (kctl etcd leave) and must not start on ${paths.dataDir} again; run kctl reset, then join with a new controller token`,
    );
  await checkAuditPolicy(cfg);
  // A data dir a newer kctl wrote is refused before anything in it changes.
  await refuseNewerDataDir(paths.dataDir, KCTL_VERSION);
  if (opts.token && cfg.spec.profile === 'api-only')
    throw new UserError(
      'an api-only control plane (spec.profile: api-only) runs alone: it cannot join another cluster with --token-file',
    );
  const tenant =
    opts.tenant &&
    (await startTenant(opts.tenant, opts.tenant.portRange, cfg, componentLogger(log, 'tenant'), {
      joining: !!opts.token,
    }));
  if (tenant) cfg = tenant.cfg;
  if (!opts.initOnly) await refuseIfOwned([paths.dataDir, paths.runDir]);
  const portAdvice = opts.tenant && tenantPortAdvice(opts.tenant.name);
  const checkHost = async () => {
    if (!opts.initOnly)
      await requireHost({
        role: 'controller',
        dataDir: paths.dataDir,
        ports: controllerPorts(cfg),
        ownPids: await ownPids(paths.runDir),
        portAdvice,
      });
  };
  // A joining controller: the token is checked by a running controller before the host checks and before anything is written.
  const join = () => joinController(opts.token, cfg, paths, componentLogger(log, 'join'), checkHost);
  const joined = opts.tenant ? await undoNewTenant(opts.tenant, tenant, join) : await join();
  if (!joined) await checkHost();
  // kine on PostgreSQL: the database exists (made if the role may), or one line says why not.
  if (!opts.tenant && cfg.spec.storage.type === 'kine' && isPostgres(cfg.spec.storage.kine.dataSource))
    await ensurePostgresDatabase(cfg.spec.storage.kine.dataSource);
  await mkdir(paths.dataDir, { recursive: true, mode: 0o755 });
  await prepareRunDir(paths.runDir);
  // Marks the data and run dirs as in use, for `kctl reset` and for a second start. --init-only
  // only prepares files and exits (two may run at once: staging takes its own lock), so it does not.
  if (opts.initOnly) return prepareAndRun(cfg, paths, opts, joined, log, undefined);
  const restart = new RestartRequest();
  await runOwning([paths.dataDir, paths.runDir], 'controller', () =>
    prepareAndRun(cfg, paths, opts, joined, log, notifier, restart),
  );
  // An upgrade stopped everything to restart into the new kctl (the dirs are released by now).
  if (restart.pending)
    await restartForUpgrade(restart.pending, {
      log: componentLogger(log, 'upgrade'),
      ready: (signal) => readyAtVersion(paths.statusSocket, restart.pending!.target, signal),
      systemd: SystemdNotifier.fromEnv({ log: componentLogger(log, 'systemd') }),
      onRollback: (reason) =>
        writeOutcome(paths.dataDir, {
          target: restart.pending!.target,
          state: 'rolled back',
          reason,
          at: new Date().toISOString(),
        }),
    });
}

async function prepareAndRun(
  cfg: ClusterConfig,
  paths: ControllerPaths,
  opts: ControllerOptions,
  joined: ControllerJoinState | null,
  log: Logger,
  notifier: SystemdNotifier | undefined,
  restart?: RestartRequest,
): Promise<void> {
  notifier?.status('staging component binaries');
  await migrateDataDir(paths.dataDir, KCTL_VERSION, componentLogger(log, 'data-dir'));
  // The effective config, for commands that run beside the controller (kctl token create).
  await writeFileAtomic(join(paths.dataDir, 'cluster-config.yaml'), stringify(cfg), 0o600);
  await stageForStart(paths.binRoot, ['controller'], componentLogger(log, 'stage'));
  if (opts.sharedPki) {
    const required = sharedPkiFilesFor(pkiOptions(cfg, paths).apiOnly);
    await adoptSharedPki(opts.sharedPki, paths.pkiDir, required, componentLogger(log, 'pki'));
  }
  // The encryption config is made here, at start only: afterwards the encryption component keeps it.
  const pki = await ensurePki(
    { ...pkiOptions(cfg, paths), encryptedResources: cfg.spec.api.encryption.resources },
    componentLogger(log, 'pki'),
  );
  await writeAddonStacks(cfg, paths.manifestsDir, pki, componentLogger(log, 'addons'));
  await prepareAudit(cfg, paths.dataDir);
  if (opts.initOnly) {
    log.info({ dataDir: paths.dataDir, storage: cfg.spec.storage.type }, 'controller initialised (--init-only)');
    return;
  }
  await raiseKernelLimits(componentLogger(log, 'host'));
  // A named cluster starting beside others gets the CPU first until it is ready.
  const endBoost = opts.tenant ? boostStart(componentLogger(log, 'host')) : undefined;

  const manager = new ComponentManager(
    controllerComponents({
      cfg,
      paths,
      pki,
      joined,
      restart,
      release: await runningRelease(),
      sharedPki: !!opts.sharedPki,
      member: opts.memberName,
    }),
    componentLogger(log, 'manager'),
    {
      onProgress: (text) => notifier?.status(text),
    },
  );
  log.info(
    { address: cfg.spec.api.address, port: cfg.spec.api.port, storage: cfg.spec.storage.type },
    'starting controller',
  );
  const url = httpsUrl(cfg.spec.api.address, cfg.spec.api.port);
  await runUntilSignal(manager, log, {
    onReady: () => {
      log.info({ url }, 'controller ready');
      notifier?.ready(`controller ready: API at ${url}`);
      endBoost?.().catch((err: unknown) =>
        log.warn({ reason: messageOf(err) }, 'could not lower the CPU priority of the start again'),
      );
    },
    onStopping: () => notifier?.stopping(),
    stopWhen: restart?.requested,
    onStopped: async () => {
      log.info('controller stopped');
      await notifier?.close();
    },
  });
}
