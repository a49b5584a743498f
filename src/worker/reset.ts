// `kctl reset` on a stopped worker: removes what kctl made — container processes and their
// cgroups, mounts, network devices and rules, routes — and then the data and run dirs.
import { execa } from 'execa';
import { existsSync, readdirSync, readFileSync, readlinkSync, rmdirSync, statSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { UserError } from '../cli/errors.ts';
import type { Logger } from '../log/logger.ts';
import { cleanupContainerd } from './containerd.ts';
import { removeCgroupRoot } from './kubelet.ts';
import type { WorkerPaths } from './paths.ts';

export const KCTL_PID_FILE = 'kctl.pid';

function alive(pid: number): boolean {
  try { process.kill(pid, 0); return true; } catch { return false; }
}

export async function refuseIfRunning(paths: WorkerPaths): Promise<void> {
  const pidFile = join(paths.runDir, KCTL_PID_FILE);
  if (!existsSync(pidFile)) return;
  const pid = Number((await readFile(pidFile, 'utf8')).trim());
  if (pid && pid !== process.pid && alive(pid)) {
    throw new UserError(`kctl is running here (pid ${pid}); stop it first (SIGTERM to pid ${pid}), then run kctl reset`);
  }
}

/** Processes started from our staged binaries (containerd shims) or living in our cgroups. */
function ourPids(paths: WorkerPaths, cgroupDirs: string[]): number[] {
  const pids = new Set<number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const exe = readlinkSync(`/proc/${entry}/exe`).replace(/ \(deleted\)$/, '');
      if (exe.startsWith(paths.binDir + '/')) pids.add(Number(entry));
    } catch { /* gone or kernel thread */ }
  }
  for (const dir of cgroupDirs) {
    for (const f of walk(dir).filter((p) => p.endsWith('/cgroup.procs'))) {
      for (const line of readFileSync(f, 'utf8').split('\n')) if (line.trim()) pids.add(Number(line));
    }
  }
  pids.delete(process.pid);
  return [...pids];
}

function walk(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    try {
      if (statSync(p).isDirectory()) out.push(...walk(p), p);
      else out.push(p);
    } catch { /* raced */ }
  }
  return out;
}

/** cgroup v1: one tree per controller hierarchy; the worker's pods live under cgroupRoot. */
export function cgroupDirsFor(cgroupRoot: string): string[] {
  const base = '/sys/fs/cgroup';
  if (!existsSync(base)) return [];
  return readdirSync(base).map((h) => join(base, h, cgroupRoot)).filter((d) => existsSync(d));
}

function mountsUnder(dirs: string[]): string[] {
  const lines = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter(Boolean);
  const points = lines.map((l) => l.split(' ')[4]!.replace(/\\040/g, ' '));
  return points.filter((p) => dirs.some((d) => p === d || p.startsWith(d + '/'))).sort((a, b) => b.length - a.length);
}

async function iptablesCleanup(paths: WorkerPaths, log: Logger): Promise<void> {
  const kubeProxy = join(paths.binDir, 'kube-proxy');
  if (existsSync(kubeProxy)) await execa(kubeProxy, ['--cleanup'], { reject: false });
  // CNI bridge/portmap chains (CNI-*), kube-proxy leftovers (KUBE-*) and every rule that jumps
  // to them: filter iptables-save's text and load it back per table (rules carry quoted
  // comments, so re-parsing them into argv by hand would be fragile).
  const ours = /^(:|-A |-N )(CNI-|KUBE-)|-j (CNI-|KUBE-)/;
  for (const [save, restore] of [['iptables-save', 'iptables-restore'], ['ip6tables-save', 'ip6tables-restore']] as const) {
    const dump = await execa(save, [], { reject: false });
    if (dump.exitCode !== 0 || !dump.stdout.split('\n').some((l) => ours.test(l))) continue;
    const kept = dump.stdout.split('\n').filter((l) => !ours.test(l)).join('\n') + '\n';
    const r = await execa(restore, ['-w', '5'], { input: kept, reject: false });
    if (r.exitCode !== 0) log.warn({ error: r.stderr.trim() }, `${restore} failed; some CNI/KUBE rules may remain`);
  }
  log.info('removed kube-proxy and CNI iptables rules');
}

export interface ResetOptions {
  cgroupRoot: string;
  bridge: string;          // the CNI bridge device
  removeRoutes: () => Promise<void>;
}

export async function resetWorker(paths: WorkerPaths, opts: ResetOptions, log: Logger): Promise<void> {
  await refuseIfRunning(paths);
  const cgroups = cgroupDirsFor(opts.cgroupRoot);
  for (let round = 0; round < 5; round++) {
    const pids = ourPids(paths, cgroups);
    if (pids.length === 0) break;
    for (const pid of pids) { try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ } }
    log.info({ count: pids.length }, 'killed leftover container processes');
    await new Promise((r) => setTimeout(r, 300));
  }
  for (const dir of cgroups) for (const d of [...walk(dir).filter((p) => !p.includes('/cgroup.') && statSafeDir(p)), dir]) { try { rmdirSync(d); } catch { /* busy or file */ } }
  await cleanupContainerd(paths);
  for (const m of mountsUnder([paths.dataDir, paths.runDir])) {
    await execa('umount', ['-l', m], { reject: false });
  }
  await removeCgroupRoot(opts.cgroupRoot).catch(() => undefined);
  await removeContainerLogLinks(paths);
  await iptablesCleanup(paths, log);
  await opts.removeRoutes();
  for (const dev of [opts.bridge]) {
    const r = await execa('ip', ['link', 'del', dev], { reject: false });
    if (r.exitCode === 0) log.info({ device: dev }, 'removed network device');
  }
  await rm(paths.dataDir, { recursive: true, force: true });
  await rm(paths.runDir, { recursive: true, force: true });
  log.info({ dataDir: paths.dataDir, runDir: paths.runDir }, 'worker reset: everything kctl made is removed');
}

/** kubelet links /var/log/containers/* to pod logs; drop the ones pointing into our data dir. */
async function removeContainerLogLinks(paths: WorkerPaths): Promise<void> {
  const dir = '/var/log/containers';
  if (!existsSync(dir)) return;
  for (const name of readdirSync(dir)) {
    try {
      if (readlinkSync(join(dir, name)).startsWith(paths.dataDir + '/')) await rm(join(dir, name), { force: true });
    } catch { /* not a link */ }
  }
}

function statSafeDir(p: string): boolean {
  try { return statSync(p).isDirectory(); } catch { return false; }
}
