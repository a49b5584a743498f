// `kctl controller`: the control plane as an ordered list of components (k0s's shape).
//   pki -> stage -> storage (etcd|kine) -> kube-apiserver -> bootstrap -> scheduler
//   -> controller-manager -> status socket
import { mkdir } from 'node:fs/promises';
import { writeFileAtomic } from '../util/fs.ts';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { Logger } from '../log/logger.ts';
import { componentLogger } from '../log/logger.ts';
import { findPayload } from '../payload/payload.ts';
import { stageComponents } from '../payload/stage.ts';
import { ensurePki, type PkiPaths } from '../pki/index.ts';
import { EtcdComponent } from '../etcd/etcd.ts';
import { KineComponent } from '../etcd/kine.ts';
import type { Component } from '../supervisor/component.ts';
import { ComponentManager } from '../supervisor/manager.ts';
import { claimDataDir, releaseDataDir } from '../supervisor/owner.ts';
import { UserError } from '../cli/errors.ts';
import { KCTL_VERSION } from '../version.ts';
import { ApiserverComponent } from './apiserver.ts';
import { BootstrapComponent } from './bootstrap.ts';
import { KonnectivityServerComponent } from './konnectivity.ts';
import { CsrApproverComponent } from './csr-approver.ts';
import { credentialsFromKubeconfig, KubeClient } from '../kube/client.ts';
import { loadConfig, type ClusterConfig, type ConfigFlags } from './config.ts';
import { controllerPaths, type ControllerPaths } from './paths.ts';
import { ControllerManagerComponent, SchedulerComponent } from './scheduler.ts';
import { StatusServerComponent } from './status.ts';

export interface ControllerOptions extends ConfigFlags {
  configFile?: string;
  dataDir: string;
  runDir: string;
  initOnly?: boolean;
}

export function controllerComponents(cfg: ClusterConfig, paths: ControllerPaths, pki: PkiPaths, log: Logger): Component[] {
  const child = (name: string) => componentLogger(log, name);
  const storage = cfg.spec.storage.type === 'etcd'
    ? new EtcdComponent(cfg, paths, pki, child('etcd'))
    : new KineComponent(cfg, paths, child('kine'));
  return [
    storage,
    // Before kube-apiserver: its egress selector dials this server's unix socket.
    new KonnectivityServerComponent(cfg, paths, pki, child('konnectivity-server')),
    new ApiserverComponent(cfg, paths, pki, child('kube-apiserver'), { egress: true }),
    new BootstrapComponent(cfg, paths, pki, child('bootstrap')),
    new SchedulerComponent(cfg, paths, pki, child('kube-scheduler')),
    new ControllerManagerComponent(cfg, paths, pki, child('kube-controller-manager')),
    new CsrApproverComponent(() => new KubeClient(credentialsFromKubeconfig(pki.adminConf)), child('csr-approver')),
  ];
}

/** Prepares the data dir; with initOnly, exits after; otherwise runs until SIGTERM/SIGINT. */
export async function runController(opts: ControllerOptions, log: Logger): Promise<void> {
  const cfg = await loadConfig(opts.configFile, opts);
  const paths = controllerPaths(opts.dataDir, opts.runDir);
  await mkdir(paths.dataDir, { recursive: true, mode: 0o755 });
  await mkdir(paths.runDir, { recursive: true, mode: 0o755 });
  // Marks the data dir as in use, for `kctl reset` and for a second start. --init-only only
  // prepares files and exits (two may run at once: staging takes its own lock), so it does not.
  if (!opts.initOnly) {
    const other = await claimDataDir(paths.dataDir, 'controller');
    if (other) throw new UserError(`a kctl ${other.role} (pid ${other.pid}) is already running on ${paths.dataDir}`);
  }
  try {
    await prepareAndRun(cfg, paths, opts, log);
  } finally {
    if (!opts.initOnly) await releaseDataDir(paths.dataDir);
  }
}

async function prepareAndRun(cfg: ClusterConfig, paths: ControllerPaths, opts: ControllerOptions, log: Logger): Promise<void> {
  // The effective config, for commands that run beside the controller (kctl token create).
  await writeFileAtomic(join(paths.dataDir, 'cluster-config.yaml'), stringify(cfg), 0o600);
  await stageComponents(await findPayload(KCTL_VERSION), paths.binDir, ['controller'], componentLogger(log, 'stage'));
  const pki = await ensurePki({
    dir: paths.pkiDir,
    apiAddress: cfg.spec.api.address,
    sans: cfg.spec.api.sans,
    apiPort: cfg.spec.api.port,
    serviceCIDR: cfg.spec.network.serviceCIDR,
    clusterDomain: cfg.spec.network.clusterDomain,
  }, componentLogger(log, 'pki'));
  if (opts.initOnly) {
    log.info({ dataDir: paths.dataDir, storage: cfg.spec.storage.type }, 'controller initialised (--init-only)');
    return;
  }

  const components = controllerComponents(cfg, paths, pki, log);
  const manager = new ComponentManager([...components], componentLogger(log, 'manager'));
  const status = new StatusServerComponent(paths.statusSocket, () => ({
    role: 'controller', version: KCTL_VERSION, pid: process.pid,
    uptimeSeconds: Math.round(process.uptime()), components: manager.status(),
    konnectivity: components.find((c): c is KonnectivityServerComponent => c instanceof KonnectivityServerComponent)?.server?.snapshot(),
  }));

  let stopping: Promise<void> | null = null;
  const stop = (signal: string) => {
    if (stopping) return stopping;
    log.info({ signal }, 'stopping controller');
    stopping = (async () => {
      await status.stop();
      await manager.stop();
      log.info('controller stopped');
    })();
    return stopping;
  };
  const done = new Promise<void>((resolve) => {
    for (const sig of ['SIGTERM', 'SIGINT'] as const) process.once(sig, () => { void stop(sig).then(resolve); });
  });

  // The status socket answers from the start, so `kctl status` shows progress while components come up.
  await status.start();
  log.info({ address: cfg.spec.api.address, port: cfg.spec.api.port, storage: cfg.spec.storage.type }, 'starting controller');
  try {
    await manager.start();
  } catch (err) {
    await status.stop();
    throw err;
  }
  log.info({ url: `https://${cfg.spec.api.address}:${cfg.spec.api.port}` }, 'controller ready');
  await done;
}
