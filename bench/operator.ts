// The operator section (--operator): control planes as pods on a management cluster, made by
// `kctl operator run` from KctlCluster objects. In the network-namespace lab of test/e2e
// (lab/management.ts): a kctl management cluster (controller mc, worker mw, where the pods run),
// a PostgreSQL on mc, the operator as a process on mc, and host edge for a hosted node.
//
// kctlcluster-ready-s (full): seconds from `kubectl apply` of a full KctlCluster to its Ready
//   condition (its database and role made, CAs made, its pod serving).
// hosted-pod-memory-mb (full, 1 node, alone): the PSS of that cluster's pod (kctl with the
//   konnectivity server, kine, kube-apiserver, kube-scheduler, kube-controller-manager, the pause
//   process), with one isolated worker joined and Ready, 20 s after the node was, the only
//   control-plane pod on its management node; (beside n): the same once the n api-only pods run
//   beside it. The pods of one image share the file pages of the image's staged binaries (PSS
//   splits them), as named clusters on one host share its bin dir.
// kctlcluster-ready-s (api-only): the same for n api-only clusters made one after another, each
//   with the earlier ones running: median and range.
// hosted-pod-memory-mb (api-only, n): their pods' PSS with all n running, 20 s after the last was
//   Ready: median and range.
// operator-memory-mb (n+1 clusters): the PSS of the operator's process with every cluster Ready.
// Columns: kctl only; no hosted-control-plane system runs here to compare with.
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import { KCTL_VERSION } from '../src/base/version.ts';
import { totalPssKiB } from '../src/host/memory.ts';
import { descendants } from '../src/host/priority.ts';
import { cpuMs } from './procs.ts';
import { median, type Row } from './rows.ts';
import { nodeReady, startLabWorker, type Tracked } from '../test/e2e/lab/cluster.ts';
import { hostedKubectl, startManagementLab, startOperator } from '../test/e2e/lab/management.ts';
import { waitFor } from '../test/wait.ts';

/**
 * API-only clusters made after the full one. Twenty would be the goal; on one two-core machine that
 * also runs the management cluster, 17 did not fit (2026-11-30: the 16th was Ready 185 s after its
 * apply; while the 17th started, the load average passed 170 and every pod's readiness probe
 * failed), so a full run stops at 12.
 */
export const OPERATOR_CLUSTERS: Record<'full' | 'quick' | 'smoke', number> = { full: 12, quick: 4, smoke: 1 };

/** The pids of a pod's processes: those whose cgroup path names the pod's uid (cgroupfs or systemd spelling). */
async function podPids(uid: string): Promise<number[]> {
  const marks = [uid, uid.replace(/-/g, '_')];
  const pids: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cgroup = await readFile(`/proc/${entry}/cgroup`, 'utf8').catch(() => '');
    if (marks.some((m) => cgroup.includes(`pod${m}`))) pids.push(Number(entry));
  }
  return pids;
}

const mib = (kib: number) => kib / 1024;

/**
 * With KCTL_BENCH_PROFILE_DIR set: the hosted kube-apiserver's Go heap profile (its
 * /debug/pprof/heap in the text form, read with the cluster's admin kubeconfig) into that folder,
 * for `go tool pprof`. What a pod's memory is made of; no row reads it.
 */
async function heapProfile(
  kubectl: (args: string[]) => Promise<{ exitCode?: number; stdout?: unknown; stderr?: unknown }>,
  label: string,
  log: (msg: string) => void,
): Promise<void> {
  const dir = process.env.KCTL_BENCH_PROFILE_DIR;
  if (!dir) return;
  const r = await kubectl(['get', '--raw', '/debug/pprof/heap?debug=1']);
  if (r.exitCode !== 0) return log(`operator: no heap profile (${label}): ${String(r.stderr).trim()}`);
  const file = join(dir, `kube-apiserver-${label}.heap`);
  await writeFile(file, String(r.stdout));
  log(`operator: kube-apiserver's heap profile in ${file}`);
}

export async function operatorFigures(o: { clusters: number; log: (msg: string) => void }): Promise<Row[]> {
  const cleanups: (() => Promise<void>)[] = [];
  const procs: Tracked[] = [];
  try {
    const m = await startManagementLab({ after: (fn) => cleanups.push(fn) }, 'bop', {
      dir: 'kctl-bench-operator-',
      pgPort: 15436,
      nodes: ['edge'],
      pgMaxConnections: 500,
    });
    const { lab, dir, kctlBin, c, mc, mw, out } = m;
    const adminConf = join(c.dataDir, 'pki', 'admin.conf');
    const must = async (what: string, r: Promise<{ exitCode?: number; stderr?: unknown }>) => {
      const x = await r;
      if (x.exitCode !== 0) throw new Error(`${what}: ${String(x.stderr).trim()}`);
    };
    const operator = await startOperator(m, 'pg');
    procs.push(operator);
    /** Applies cluster `name`; seconds from the apply to its Ready condition. */
    const make = async (name: string, profile: 'full' | 'api-only'): Promise<number> => {
      const object = stringify({
        apiVersion: 'kctl.dev/v1alpha1',
        kind: 'KctlCluster',
        metadata: { name },
        spec: {
          version: KCTL_VERSION,
          // kctl turns kube-apiserver's profiling off; the heap profile (below) needs it on.
          config: {
            profile,
            ...(process.env.KCTL_BENCH_PROFILE_DIR ? { api: { extraArgs: { profiling: 'true' } } } : {}),
          },
          datastore: { postgres: { secretName: 'pg' } },
        },
      });
      const applied = Date.now();
      await must(`KctlCluster ${name}`, c.kubectl(['apply', '-f', '-'], object));
      await waitFor(
        `${name} Ready`,
        600_000,
        async () =>
          String(
            (await c.kubectl(['get', 'kc', name, '-o', 'jsonpath={.status.conditions[?(@.type=="Ready")].status}']))
              .stdout,
          ) === 'True',
        { log: operator.log, intervalMs: 250 },
      );
      return (Date.now() - applied) / 1000;
    };
    const podMemory = async (name: string): Promise<number> => {
      const uid = String(
        (await c.kubectl(['get', 'pod', '-l', `kctl.dev/cluster=${name}`, '-o', 'jsonpath={.items[0].metadata.uid}']))
          .stdout,
      );
      const pids = await podPids(uid);
      if (pids.length < 2) throw new Error(`found ${pids.length} processes of ${name}'s pod ${uid}`);
      return mib(await totalPssKiB(pids));
    };
    /**
     * "kube-apiserver 120 (anon 100, file 20, cpu 9.1 s), ...": a pod's PSS by program (MiB), how much
     * of it is file-backed, and the CPU time each has used since it started.
     */
    const breakdown = async (name: string): Promise<string> => {
      const uid = String(
        (await c.kubectl(['get', 'pod', '-l', `kctl.dev/cluster=${name}`, '-o', 'jsonpath={.items[0].metadata.uid}']))
          .stdout,
      );
      const parts: string[] = [];
      for (const pid of await podPids(uid)) {
        const comm = (await readFile(`/proc/${pid}/comm`, 'utf8').catch(() => '?')).trim();
        const rollup = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => '');
        const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(rollup)?.[1] ?? 0);
        parts.push(
          `${comm} ${mib(kb('Pss')).toFixed(0)} (anon ${mib(kb('Pss_Anon')).toFixed(0)}, file ${mib(kb('Pss_File')).toFixed(0)}, cpu ${(cpuMs(pid) / 1000).toFixed(1)} s)`,
        );
      }
      return parts.join(', ');
    };

    const fullReady = await make('f1', 'full');
    o.log(`operator: full cluster Ready ${fullReady.toFixed(1)} s after apply`);
    const token = await out.run(kctlBin, ['cluster', 'token', 'f1', '--kubeconfig', adminConf, '--expiry', '1h'], {
      timeout: 60_000,
    });
    if (token.exitCode !== 0) throw new Error(`kctl cluster token: ${String(token.stderr).trim()}`);
    const edge = lab.host('edge');
    await lab.isolate(edge, mw, mc);
    const worker = startLabWorker(kctlBin, edge, dir, String(token.stdout).trim());
    procs.push(worker);
    const hosted = await hostedKubectl(m, 'f1', 10);
    await waitFor('edge Ready in f1', 300_000, () => nodeReady(hosted, 'edge'), worker.log);
    await sleep(20_000);
    const fullPss = await podMemory('f1');
    o.log(`operator: full cluster's pod ${fullPss.toFixed(0)} MiB PSS with its node Ready: ${await breakdown('f1')}`);
    await heapProfile(hosted, 'full-alone', o.log);

    const readyTimes: number[] = [];
    for (let i = 1; i <= o.clusters; i++) {
      readyTimes.push(await make(`a${i}`, 'api-only'));
      o.log(`operator: api-only cluster ${i}/${o.clusters} Ready ${readyTimes.at(-1)!.toFixed(1)} s after apply`);
    }
    await sleep(20_000);
    const pss: number[] = [];
    for (let i = 1; i <= o.clusters; i++) pss.push(await podMemory(`a${i}`));
    o.log(`operator: the first api-only pod by program: ${await breakdown('a1')}`);
    const fullBeside = await podMemory('f1');
    o.log(`operator: the full cluster's pod beside them ${fullBeside.toFixed(0)} MiB: ${await breakdown('f1')}`);
    await heapProfile(hosted, 'full-beside', o.log);
    const operatorPss = mib(await totalPssKiB(await descendants(operator.child.pid!)));
    o.log(
      `operator: api-only pods ${pss.map((x) => x.toFixed(0)).join(', ')} MiB PSS; operator ${operatorPss.toFixed(1)} MiB`,
    );
    const range = (xs: number[]): [number, number] => [Math.min(...xs), Math.max(...xs)];
    return [
      {
        scenario: 'kctlcluster-ready-s (full)',
        unit: 's',
        kctl: fullReady,
        upstream: null,
        direct: null,
        note: 'kubectl apply of a full KctlCluster to its Ready condition: database and role made, CAs made, the pod serving',
      },
      {
        scenario: 'hosted-pod-memory-mb (full, 1 node, alone)',
        unit: 'MiB',
        kctl: fullPss,
        upstream: null,
        direct: null,
        note: "PSS of a full cluster's control-plane pod (kctl, kine, kube-apiserver, kube-scheduler, kube-controller-manager, pause) with one isolated node Ready, the only control-plane pod on its management node: it alone maps the image's binaries",
      },
      {
        scenario: `hosted-pod-memory-mb (full, 1 node, beside ${o.clusters})`,
        unit: 'MiB',
        kctl: fullBeside,
        upstream: null,
        direct: null,
        note: `the same pod with the ${o.clusters} api-only pods beside it on its node, sharing the image's binaries; target at most 300`,
      },
      {
        scenario: 'kctlcluster-ready-s (api-only)',
        unit: 's',
        kctl: median(readyTimes),
        upstream: null,
        direct: null,
        range: { kctl: range(readyTimes) },
        note: `${o.clusters} api-only KctlClusters applied one after another, each with the earlier ones running: median (range)`,
      },
      {
        scenario: `hosted-pod-memory-mb (api-only, ${o.clusters})`,
        unit: 'MiB',
        kctl: median(pss),
        upstream: null,
        direct: null,
        range: { kctl: range(pss) },
        note: `PSS of each api-only control-plane pod with all ${o.clusters} running: median (range); target at most 200`,
      },
      {
        scenario: `operator-memory-mb (${o.clusters + 1} clusters)`,
        unit: 'MiB',
        kctl: operatorPss,
        upstream: null,
        direct: null,
        note: `PSS of the kctl operator run process with ${o.clusters + 1} KctlClusters Ready; target at most 100 at 20`,
      },
    ];
  } finally {
    for (const p of procs.reverse()) {
      p.child.kill('SIGTERM');
      if (!(await Promise.race([p.exited.then(() => true), sleep(60_000).then(() => false)]))) p.child.kill('SIGKILL');
    }
    for (const fn of cleanups) await fn();
  }
}
