// The hosted section (--hosted): many full clusters on one controller host, each a named control
// plane (`kctl controller --name`, spec.profile: full, kine on SQLite, ports picked by kctl) with
// one real worker on its own lab host (isolated: it only dials out). In the network-namespace lab
// of test/e2e.
//
// hosted-memory-mb (n): per cluster, the PSS of its control plane (its kctl process with the
//   konnectivity server, kine, kube-apiserver, kube-scheduler, kube-controller-manager) as
//   `kctl tenant list` reports it, with n clusters on the host, every node Ready and every add-on
//   pod running, 20 s after the last one was; the mean over the n. PSS splits the pages the
//   clusters share (the one staged copy of the binaries) between them.
// hosted-ready-s: on a host running n clusters, seconds from spawning the next cluster's
//   `kctl controller --name` (nothing staged: the host's copy is used) to its "controller ready".
//   The n workers share this machine's two cores with the controller host, which they would not in
//   use (nodes run elsewhere): before this figure, their processes and pods get a CPU weight of
//   64 against the 1,024 of every control-plane process (cgroup cpu.shares), so they run on what
//   the control planes leave.
// A second pass measures the same with spec.gcPercent: 100 (Go's own GOGC) instead of a named
// full cluster's default 25: what that default saves, and what it costs at start.
// Columns: kctl only; no hosted-control-plane system runs here to compare with.
import { mkdir, readdir, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { TenantListEntry } from '../src/cli/tenant.ts';
import type { Row } from './rows.ts';
import { pssKiB } from '../src/host/memory.ts';
import { descendants } from '../src/host/priority.ts';
import { readPidFile } from '../src/supervisor/pidfile.ts';
import { controllerReady, startLabWorker, track, type Tracked } from '../test/e2e/lab/cluster.ts';
import { startLab } from '../test/e2e/lab/lab-test.ts';
import { waitFor } from '../test/wait.ts';

/** Clusters on the host before the next one is started: the 10, fewer in the shorter modes. */
export const HOSTED_CLUSTERS: Record<'full' | 'quick' | 'smoke', number> = { full: 10, quick: 3, smoke: 2 };

/** Workers joining at once: more starve the two cores and time out their joins. */
const JOIN_BATCH = 3;

/**
 * One pass: `clusters` clusters, then the next one. With `gcPercent`, every cluster's config sets
 * spec.gcPercent (kube-apiserver's and kine's GOGC), and the rows say so.
 */
export async function hostedFigures(o: {
  clusters: number;
  log: (msg: string) => void;
  gcPercent?: number;
}): Promise<Row[]> {
  const cleanups: (() => Promise<void>)[] = [];
  const procs: Tracked[] = [];
  const clusters: Tracked[] = [];
  const n = o.clusters;
  try {
    const workers = Array.from({ length: n }, (_, i) => `w${i + 1}`);
    const { lab, dir, kctlBin } = await startLab({ after: (fn) => cleanups.push(fn) }, 'bhost', ['ctl', ...workers], {
      dir: 'kctl-bench-hosted-',
      workers,
    });
    const ctl = lab.host('ctl');
    const root = ['--data-dir', join(dir, 'c-data'), '--run-dir', join(dir, 'c-run')];
    const config = join(dir, 'full.yaml');
    const gc = o.gcPercent ? `  gcPercent: ${o.gcPercent}\n` : '';
    await writeFile(config, `spec:\n  profile: full\n${gc}  api: { address: ${ctl.ip} }\n`);
    const pass = o.gcPercent ? `, spec.gcPercent ${o.gcPercent}` : '';
    const label = (scenario: string) =>
      o.gcPercent ? `${scenario.replace(/\)$/, '')}, gcPercent ${o.gcPercent})` : scenario;
    const kctl = async (args: string[]) => {
      const r = await ctl.run(kctlBin, [...root, ...args], { timeout: 120_000 });
      if (r.exitCode !== 0) throw new Error(`kctl ${args.join(' ')}: ${String(r.stderr).trim()}`);
      return String(r.stdout);
    };
    /** Spawns cluster `name`; seconds from the spawn to its "controller ready". */
    const startCluster = async (name: string): Promise<number> => {
      const spawned = Date.now();
      const p = track(ctl.spawn(kctlBin, [...root, '--name', name, 'controller', '--single', '--config', config]));
      procs.push(p);
      clusters.push(p);
      await controllerReady(p, `cluster ${name} ready`);
      return (Date.now() - spawned) / 1000;
    };
    const joinWorker = async (i: number): Promise<void> => {
      const token = (await kctl(['--name', `c${i}`, 'token', 'create', '--role', 'worker', '--expiry', '1h'])).trim();
      const host = lab.host(`w${i}`);
      await lab.isolate(host, ctl);
      const w = startLabWorker(kctlBin, host, dir, token);
      procs.push(w);
      await waitFor(`the worker of c${i} ready`, 300_000, async () => w.saw('"msg":"worker ready"'), w.log);
    };
    const settled = async (names: string[]): Promise<void> => {
      for (const name of names)
        await waitFor(`every pod of ${name} running`, 300_000, async () => {
          const phases = (
            await kctl(['--name', name, 'kubectl', 'get', 'pods', '-A', '-o', 'jsonpath={.items[*].status.phase}'])
          )
            .trim()
            .split(' ');
          return phases.length >= 2 && phases.every((p) => p === 'Running');
        });
      await sleep(20_000);
    };
    const memory = async (): Promise<number[]> => {
      const list = JSON.parse(await kctl(['tenant', 'list', '-o', 'json'])) as TenantListEntry[];
      if (!list.every((e) => e.nodes?.ready === 1))
        throw new Error(`a cluster's node is not Ready: ${JSON.stringify(list.map((e) => [e.name, e.nodes]))}`);
      return list.map((e) => e.memoryMiB!);
    };
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

    const firstReady = await startCluster('c1');
    await joinWorker(1);
    await settled(['c1']);
    const one = (await memory())[0]!;
    o.log(
      `hosted${pass}: one cluster ready ${firstReady.toFixed(1)} s after its spawn (binaries staged then); ${one} MiB PSS with its node`,
    );

    const readyTimes: number[] = [];
    for (let i = 2; i <= n; i++) readyTimes.push(await startCluster(`c${i}`));
    for (let i = 2; i <= n; i += JOIN_BATCH)
      await Promise.all(Array.from({ length: Math.min(JOIN_BATCH, n - i + 1) }, (_, k) => joinWorker(i + k)));
    await settled(Array.from({ length: n }, (_, i) => `c${i + 1}`));
    const many = await memory();
    o.log(`hosted${pass}: ${n} clusters, PSS per cluster ${many.join(', ')} MiB (mean ${mean(many).toFixed(0)})`);
    o.log(`hosted${pass}: mean PSS per program: ${await perProgram(join(dir, 'c-run', 'tenants'), clusters)}`);

    await deprioritize(procs.filter((p) => !clusters.includes(p)).map((p) => p.child.pid!));
    const next = await startCluster(`c${n + 1}`);
    o.log(`hosted${pass}: cluster ${n + 1} ready ${next.toFixed(1)} s after its spawn, on a host running ${n}`);
    o.log(`hosted${pass}: its steps: ${steps(clusters.at(-1)!)}`);
    return [
      {
        scenario: label('hosted-memory-mb (1)'),
        unit: 'MiB',
        kctl: one,
        upstream: null,
        direct: null,
        note: 'one full named cluster with its node Ready: PSS of its kctl, kine, kube-apiserver, kube-scheduler, kube-controller-manager (kctl tenant list)',
      },
      {
        scenario: label(`hosted-memory-mb (${n})`),
        unit: 'MiB',
        kctl: mean(many),
        upstream: null,
        direct: null,
        range: { kctl: [Math.min(...many), Math.max(...many)] },
        note: `${n} full named clusters on one host, each with its node Ready: PSS per cluster, mean (range over the clusters)`,
      },
      {
        scenario: label(`hosted-ready-s (${n + 1}th)`),
        unit: 's',
        kctl: next,
        upstream: null,
        direct: null,
        note: `on a host running ${n} clusters: spawn of the next kctl controller --name (full, first start: PKI made, ports picked, nothing staged) to "controller ready"; clusters 2-${n} took ${Math.min(...readyTimes).toFixed(1)}-${Math.max(...readyTimes).toFixed(1)} s`,
      },
    ];
  } finally {
    // Workers first, then the clusters, each stopping its components in order; a stuck one is killed.
    for (const p of procs.reverse()) {
      p.child.kill('SIGTERM');
      if (!(await Promise.race([p.exited.then(() => true), sleep(60_000).then(() => false)]))) p.child.kill('SIGKILL');
    }
    for (const fn of cleanups) await fn();
    await rmdir(NODES_CGROUP).catch(() => undefined);
    await writeFile(join(CPU_CGROUP, 'kctl', 'cpu.shares'), '1024').catch(() => undefined);
  }
}

/** "kube-apiserver 157, kctl 47, ..." (MiB): the mean PSS of each program over the clusters, from their pid files. */
async function perProgram(runDirs: string, clusters: Tracked[]): Promise<string> {
  const kib = new Map<string, number[]>([['kctl', await Promise.all(clusters.map((c) => pssKiB(c.child.pid!)))]]);
  for (const name of await readdir(runDirs))
    for (const file of (await readdir(join(runDirs, name))).filter((f) => f.endsWith('.pid'))) {
      const pid = await readPidFile(join(runDirs, name, file));
      if (pid !== undefined) kib.set(file.slice(0, -4), [...(kib.get(file.slice(0, -4)) ?? []), await pssKiB(pid)]);
    }
  return [...kib]
    .map(([program, xs]) => [program, xs.reduce((a, b) => a + b, 0) / xs.length / 1024] as const)
    .sort((a, b) => b[1] - a[1])
    .map(([program, mib]) => `${program} ${mib.toFixed(0)}`)
    .join(', ');
}

/** "kube-apiserver 4.1, ..." from a controller's "NAME ready in Ns" lines: where its start went. */
function steps(p: Tracked): string {
  return p
    .lines(/ ready in /)
    .map((l) => /"msg":"(\S+) ready in ([\d.]+)s"/.exec(l))
    .filter((m) => m !== null)
    .map((m) => `${m[1]} ${m[2]}`)
    .join(', ');
}

const CPU_CGROUP = '/sys/fs/cgroup/cpu';
const NODES_CGROUP = join(CPU_CGROUP, 'kctl-bench-nodes');

/**
 * Moves the process trees of `roots` (the lab workers' kctl) into a cpu cgroup of weight 64, and
 * gives the workers' pods (under /kctl, kubelet's cgroup root) the same weight.
 */
async function deprioritize(roots: number[]): Promise<void> {
  await mkdir(NODES_CGROUP, { recursive: true });
  await writeFile(join(NODES_CGROUP, 'cpu.shares'), '64');
  await writeFile(join(CPU_CGROUP, 'kctl', 'cpu.shares'), '64');
  const tree = (await Promise.all(roots.map((pid) => descendants(pid)))).flat();
  for (const pid of tree) await writeFile(join(NODES_CGROUP, 'cgroup.procs'), String(pid)).catch(() => undefined);
}
