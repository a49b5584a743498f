// `kctl reset` on a stopped controller: stops the children a crashed kctl left behind (only
// those whose pid files prove them ours), then removes the run dir (sockets, pid files; only if
// kctl made it) and the data dir (staged binaries, etcd / kine data, PKI, kubeconfigs,
// cluster-config.yaml).
import { join } from 'node:path';
import type { Logger } from '../../base/log.ts';
import { cleanupStalePidFile } from '../../supervisor/pidfile.ts';
import { removeTree } from '../../base/fs.ts';
import { releasePorts } from '../../host/port-claims.ts';
import { removeRunDir } from '../../supervisor/run-dir.ts';
import { ETCD } from '../../etcd/etcd.ts';
import { KINE } from '../../etcd/kine.ts';
import { KUBE_APISERVER } from './apiserver.ts';
import { KUBE_CONTROLLER_MANAGER } from './controller-manager.ts';
import type { ControllerPaths } from '../config/paths.ts';
import { KUBE_SCHEDULER } from './scheduler.ts';

/**
 * Every program a controller may supervise, in start order (storage is etcd or kine): pid file
 * <run-dir>/<name>.pid, binary <bin>/<name>. The names are the components' own constants; a unit
 * test builds every profile's list and fails when a supervised component is missing here.
 */
export const CONTROLLER_PROGRAMS = [ETCD, KINE, KUBE_APISERVER, KUBE_SCHEDULER, KUBE_CONTROLLER_MANAGER] as const;

/**
 * Stops the programs a crashed kctl left, last started first. A pid file naming a live process
 * that does not run our staged binary is dropped, the process left alone.
 */
export async function stopControllerLeftovers(
  paths: ControllerPaths,
  log: Logger,
  stopTimeoutMs = 10_000,
): Promise<void> {
  for (const name of [...CONTROLLER_PROGRAMS].reverse()) {
    await cleanupStalePidFile(join(paths.runDir, `${name}.pid`), join(paths.binDir, name), stopTimeoutMs, log);
  }
}

export async function resetController(paths: ControllerPaths, log: Logger): Promise<void> {
  await stopControllerLeftovers(paths, log);
  await removeRunDir(paths.runDir, log);
  for (const removed of await removeTree(paths.dataDir)) log.info({ path: removed }, `removed ${removed}`);
  const ports = await releasePorts(paths.dataDir); // a tenant's: free for the next at once
  if (ports.length) log.info({ ports }, `gave back the ports claimed host-wide: ${ports.join(', ')}`);
  log.info({ dataDir: paths.dataDir, runDir: paths.runDir }, 'controller reset: everything kctl made is removed');
}
