// `kctl reset` on a stopped worker: removes what kctl made — container processes and their
// cgroups, mounts, network devices and rules, routes — and then the run dir (only if kctl made it)
// and the data dir, never through a mount point that is still mounted.
// Whether a kctl still runs on the data dir is the caller's check (src/cli/reset.ts).
import { execa } from 'execa';
import { existsSync, readdirSync, readlinkSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { MASQ_CHAIN } from './cni.ts';
import { removeNodeLocalAddress } from './node-local-api.ts';
import type { Logger } from '../base/log.ts';
import { removeTree } from '../base/fs.ts';
import { removeRunDir } from '../supervisor/run-dir.ts';
import { cleanupContainerd } from './containerd.ts';
import { KUBE_PROXY } from './kube-proxy.ts';
import { removeCgroupRoot } from './kubelet.ts';
import type { WorkerPaths } from './paths.ts';

/** Processes started from our staged binaries (containerd, kubelet or shims left by a killed kctl). */
export function stagedBinaryPids(paths: WorkerPaths): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const exe = readlinkSync(`/proc/${entry}/exe`).replace(/ \(deleted\)$/, '');
      if (exe.startsWith(paths.binRoot + '/')) pids.push(Number(entry));
    } catch {
      /* gone or kernel thread */
    }
  }
  return pids;
}

async function iptablesCleanup(paths: WorkerPaths, log: Logger): Promise<void> {
  const kubeProxy = join(paths.binDir, KUBE_PROXY);
  if (existsSync(kubeProxy)) await execa(kubeProxy, ['--cleanup'], { reject: false });
  // CNI bridge/portmap chains (CNI-*), kube-proxy leftovers (KUBE-*) and every rule that jumps
  // to them: filter iptables-save's text and load it back per table (rules carry quoted
  // comments, so re-parsing them into argv by hand would be fragile).
  const ours = new RegExp(`^(:|-A |-N )(CNI-|KUBE-|${MASQ_CHAIN} )|-j (CNI-|KUBE-|${MASQ_CHAIN}\\b)`);
  for (const [save, restore] of [
    ['iptables-save', 'iptables-restore'],
    ['ip6tables-save', 'ip6tables-restore'],
  ] as const) {
    const dump = await execa(save, [], { reject: false });
    if (dump.exitCode !== 0 || !dump.stdout.split('\n').some((l) => ours.test(l))) continue;
    const kept =
      dump.stdout
        .split('\n')
        .filter((l) => !ours.test(l))
        .join('\n') + '\n';
    const r = await execa(restore, ['-w', '5'], { input: kept, reject: false });
    if (r.exitCode !== 0) log.warn({ error: r.stderr.trim() }, `${restore} failed; some CNI/KUBE rules may remain`);
  }
  log.info('removed kube-proxy and CNI iptables rules');
}

export interface ResetOptions {
  cgroupRoot: string;
  bridge: string; // the CNI bridge device
  removeRoutes: () => Promise<void>;
}

export async function resetWorker(paths: WorkerPaths, opts: ResetOptions, log: Logger): Promise<void> {
  const pids = stagedBinaryPids(paths);
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  if (pids.length) log.info({ count: pids.length }, 'killed leftover kctl child processes');
  // Container processes live in the worker's cgroups: removeCgroupRoot kills them and removes the tree.
  await removeCgroupRoot(opts.cgroupRoot).catch(() => undefined);
  await cleanupContainerd(paths); // shims, and every mount below the data and run dirs
  await removeContainerLogLinks(paths);
  await iptablesCleanup(paths, log);
  await opts.removeRoutes();
  await removeNodeLocalAddress().catch(() => undefined);
  for (const dev of [opts.bridge]) {
    const r = await execa('ip', ['link', 'del', dev], { reject: false });
    if (r.exitCode === 0) log.info({ device: dev }, 'removed network device');
  }
  await removeRunDir(paths.runDir, log);
  for (const removed of await removeTree(paths.dataDir)) log.info({ path: removed }, `removed ${removed}`);
  log.info({ dataDir: paths.dataDir, runDir: paths.runDir }, 'worker reset: everything kctl made is removed');
}

/** kubelet links /var/log/containers/* to pod logs; drop the ones pointing into our data dir. */
async function removeContainerLogLinks(paths: WorkerPaths): Promise<void> {
  const dir = '/var/log/containers';
  if (!existsSync(dir)) return;
  for (const name of readdirSync(dir)) {
    try {
      if (readlinkSync(join(dir, name)).startsWith(paths.dataDir + '/')) await rm(join(dir, name), { force: true });
    } catch {
      /* not a link */
    }
  }
}
