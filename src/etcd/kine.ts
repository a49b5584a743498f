// kine: an etcd API over SQLite (default, a file under the data dir) or a real SQL database,
// served on a unix socket for kube-apiserver.
import { execa } from 'execa';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { ClusterConfig } from '../controller/config.ts';
import type { ControllerPaths } from '../controller/paths.ts';
import { pollUntil } from '../controller/probe.ts';
import type { Logger } from '../log/logger.ts';
import { Supervisor } from '../supervisor/process.ts';

export function kineDataSource(cfg: ClusterConfig, paths: ControllerPaths): string {
  return cfg.spec.storage.kine.dataSource ?? `sqlite://${join(paths.kineDbDir, 'state.db')}?_journal=WAL&cache=shared&_busy_timeout=30000`;
}

export function kineEndpoint(paths: ControllerPaths): string {
  return `unix://${paths.kineSocket}`;
}

/** Ready means a write and a read of a probe key through the etcd API both succeed. */
function kineReady(paths: ControllerPaths): (signal: AbortSignal) => Promise<void> {
  const etcdctl = join(paths.binDir, 'etcdctl');
  const base = ['--endpoints', kineEndpoint(paths), '--dial-timeout=2s', '--command-timeout=5s'];
  return (signal) => pollUntil(signal, 'kine', async () => {
    // A fresh key each time: kine, like kube-apiserver's use of etcd, only creates with a plain put.
    const key = `/kctl/readiness-probe/${process.pid}-${Date.now()}`;
    const value = `probe-${Date.now()}`;
    const opts = { env: { ETCDCTL_API: '3' }, extendEnv: false };
    await execa(etcdctl, [...base, 'put', key, value], opts);
    const got = await execa(etcdctl, [...base, 'get', '--print-value-only', key], opts);
    await execa(etcdctl, [...base, 'del', key], { ...opts, reject: false });
    if (got.stdout.trim() !== value) throw new Error(`probe key read back "${got.stdout.trim()}", wrote "${value}"`);
  });
}

export class KineComponent extends Supervisor {
  constructor(private readonly cfg: ClusterConfig, private readonly paths: ControllerPaths, log: Logger) {
    super({
      name: 'kine',
      binary: join(paths.binDir, 'kine'),
      // No metrics listener: a fixed :8080 would collide between controllers on one host.
      args: [`--endpoint=${kineDataSource(cfg, paths)}`, `--listen-address=${kineEndpoint(paths)}`, '--metrics-bind-address=0', '--log-format=json'],
      runDir: paths.runDir,
      log,
      ready: kineReady(paths),
    });
  }

  override async init(): Promise<void> {
    if (!this.cfg.spec.storage.kine.dataSource) await mkdir(this.paths.kineDbDir, { recursive: true, mode: 0o700 });
    await rm(this.paths.kineSocket, { force: true }); // a socket left by a killed kine blocks the bind
    await super.init();
  }
}
