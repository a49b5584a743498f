// `npm run bench [-- --quick | --smoke] [--wan | --pod-network | --hosted | --front-door | --operator] [--json]`: the konnectivity tunnel benchmark (direct
// TCP vs upstream ANP vs kctl, the same driver for every path: the Go konnectivity-client driver
// for the speed scenarios, the TypeScript one for the rest; paths alternating, medians of
// repetitions) and kctl's controller figures; with --wan instead, the WAN-profile section
// (wan.ts); with --pod-network, pod-to-pod figures per network mode (pod-network.ts); with
// --hosted, many full clusters on one controller host (hosted.ts); with --front-door, what the
// front door costs a TLS connection (front-door.ts); with --operator, control planes as pods on
// a management cluster (operator.ts). Progress on
// stderr; with --json the results on stdout.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { controllerFigures } from './controller.ts';
import { connectDialer, directDialer, grpcDialer, type Dialer, type PathName } from './driver.ts';
import { dialLatencies, goDriver, throughput, type GoPath } from './go-driver.ts';
import { makePki, type BenchPki } from './pki.ts';
import { median, reportRows, type Row } from './rows.ts';
import { cpuMs, firstJsonLine, startProc, type Proc } from './procs.ts';
import { freePort } from '../test/ports.ts';
import { executableFigures } from './executable.ts';
import { holOthersRatio, idleMemoryPerConn, leakResidual, type Targets } from './scenarios.ts';
import { startKctl, startUpstream, type Stack, type StackName } from './stacks.ts';
import { haFigures } from './ha.ts';
import { tenantFigures } from './tenants.ts';
import { workerJoinSeconds } from './worker.ts';
import { WAN_SIZES, wanFigures } from './wan.ts';
import { POD_NETWORK_SIZES, podNetworkFigures } from './pod-network.ts';
import { HOSTED_CLUSTERS, hostedFigures } from './hosted.ts';
import { OPERATOR_CLUSTERS, operatorFigures } from './operator.ts';
import { FRONT_DOOR_SIZES, frontDoorFigures } from './front-door.ts';
import { recordRun } from './record.ts';

interface Sizes {
  /** Repetitions of the throughput scenarios: cheap, and the noisiest figures on a shared host. */
  tputReps: number;
  /** Repetitions of the scenarios that need fresh processes each time. */
  freshReps: number;
  fresh: boolean;
  bulk1: number;
  bulk16: number;
  dials: number;
  dialChunk: number;
  idleConns: number;
  leakCycles: number;
  holConns: number;
  holWindowMs: number;
  controller: boolean;
}

const MiB = 1024 * 1024;
const SIZES: Record<'full' | 'quick' | 'smoke', Sizes> = {
  full: {
    tputReps: 11,
    freshReps: 3,
    fresh: true,
    bulk1: 128 * MiB,
    bulk16: 16 * MiB,
    dials: 5000,
    dialChunk: 500,
    idleConns: 1000,
    leakCycles: 10_000,
    holConns: 100,
    holWindowMs: 3000,
    controller: true,
  },
  quick: {
    tputReps: 5,
    freshReps: 1,
    fresh: true,
    bulk1: 64 * MiB,
    bulk16: 8 * MiB,
    dials: 1000,
    dialChunk: 250,
    idleConns: 300,
    leakCycles: 2000,
    holConns: 50,
    holWindowMs: 2000,
    controller: true,
  },
  smoke: {
    tputReps: 1,
    freshReps: 1,
    fresh: false,
    bulk1: 4 * MiB,
    bulk16: 1 * MiB,
    dials: 40,
    dialChunk: 20,
    idleConns: 20,
    leakCycles: 60,
    holConns: 8,
    holWindowMs: 500,
    controller: false,
  },
};

const PATHS: PathName[] = ['direct', 'upstream', 'kctl', 'upstream-connect', 'kctl-connect'];
/** Each tunneled path: the processes that carry it, and the frontend the driver dials. */
const VIA: Record<Exclude<PathName, 'direct'>, { stack: StackName; mode: 'grpc' | 'connect' }> = {
  upstream: { stack: 'upstream', mode: 'grpc' },
  kctl: { stack: 'kctl', mode: 'grpc' },
  'upstream-connect': { stack: 'upstream-connect', mode: 'connect' },
  'kctl-connect': { stack: 'kctl', mode: 'connect' },
};
const log = (m: string): void => void process.stderr.write(`[bench] ${m}\n`);

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
}

class Bench {
  private stacks = new Map<StackName, Stack>();
  constructor(
    readonly pki: BenchPki,
    readonly dir: string,
  ) {}

  async stack(name: StackName, fresh = false): Promise<Stack> {
    const have = this.stacks.get(name);
    if (have && !fresh) return have;
    if (have) await have.stop();
    const s =
      name === 'kctl'
        ? await startKctl(this.pki, this.dir)
        : await startUpstream(this.pki, this.dir, name === 'upstream' ? 'grpc' : 'http-connect');
    this.stacks.set(name, s);
    return s;
  }

  async dialer(path: PathName, fresh = false): Promise<{ d: Dialer; stack?: Stack }> {
    if (path === 'direct') return { d: directDialer() };
    const stack = await this.stack(VIA[path].stack, fresh);
    if (path === 'kctl-connect' || path === 'upstream-connect')
      return { d: connectDialer(path, stack.connectUds!), stack };
    return { d: grpcDialer(path, stack.grpcUds!), stack };
  }

  /** How the Go driver reaches `path` (through the current stack). */
  async goPath(path: PathName): Promise<GoPath> {
    if (path === 'direct') return { mode: 'direct' };
    const { stack: name, mode } = VIA[path];
    const stack = await this.stack(name);
    return { mode, uds: mode === 'connect' ? stack.connectUds! : stack.grpcUds! };
  }

  async stop(): Promise<void> {
    for (const s of this.stacks.values()) await s.stop();
    this.stacks.clear();
  }
}

/** Rows for one measured figure: the GRPC row and the HTTP-CONNECT row (kctl vs upstream vs direct, each). */
function rows(scenario: string, unit: string, by: Partial<Record<PathName, number>>, direct = true): Row[] {
  const v = (p: PathName): number | null => by[p] ?? null;
  return [
    { scenario, unit, kctl: v('kctl'), upstream: v('upstream'), direct: direct ? v('direct') : null },
    {
      scenario: `${scenario} (http-connect)`,
      unit,
      kctl: v('kctl-connect'),
      upstream: v('upstream-connect'),
      direct: direct ? v('direct') : null,
    },
  ];
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const json = argv.includes('--json');
  const wan = argv.includes('--wan');
  const podNetwork = argv.includes('--pod-network');
  const hosted = argv.includes('--hosted');
  const frontDoor = argv.includes('--front-door');
  const operator = argv.includes('--operator');
  const mode = argv.includes('--smoke') ? 'smoke' : argv.includes('--quick') ? 'quick' : 'full';
  const unknown = argv.filter(
    (a) =>
      ![
        '--json',
        '--quick',
        '--smoke',
        '--wan',
        '--pod-network',
        '--hosted',
        '--front-door',
        '--operator',
        '--debug',
      ].includes(a),
  );
  if (unknown.length)
    throw new Error(
      `unknown option ${unknown.join(' ')}; use --quick, --smoke, --wan, --pod-network, --hosted, --front-door, --operator, --json, --debug (stack on failure)`,
    );
  if ([wan, podNetwork, hosted, frontDoor, operator].filter(Boolean).length > 1)
    throw new Error('--wan, --pod-network, --hosted, --front-door and --operator are separate runs; give one of them');
  const started = Date.now();
  const dir = await mkdtemp(join(tmpdir(), 'kctl-bench-'));
  let out: Row[];
  try {
    log(
      `mode ${mode}${wan ? ', WAN section' : podNetwork ? ', pod network section' : hosted ? ', hosted section' : frontDoor ? ', front door section' : operator ? ', operator section' : ''}; workdir ${dir}`,
    );
    const pki = await makePki(dir);
    out = wan
      ? await wanFigures({ dir, pki, sizes: WAN_SIZES[mode], log })
      : podNetwork
        ? await podNetworkFigures({ sizes: POD_NETWORK_SIZES[mode], log })
        : frontDoor
          ? await frontDoorFigures({ pki, sizes: FRONT_DOOR_SIZES[mode], log })
          : operator
            ? await operatorFigures({ clusters: OPERATOR_CLUSTERS[mode], log })
            : hosted
              ? [
                  ...(await hostedFigures({ clusters: HOSTED_CLUSTERS[mode], log })),
                  ...(await hostedFigures({ clusters: HOSTED_CLUSTERS[mode], log, gcPercent: 100 })),
                ]
              : await sections(mode, dir, pki);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  const seconds = Math.round((Date.now() - started) / 1000);
  log(`done in ${seconds} s`);
  reportRows(out, json);
  if (mode === 'full') {
    const section = wan
      ? 'wan'
      : podNetwork
        ? 'pod-network'
        : hosted
          ? 'hosted'
          : frontDoor
            ? 'front-door'
            : operator
              ? 'operator'
              : 'main';
    log(`recorded in ${relative(process.cwd(), await recordRun(section, out, seconds))}`);
  }
}

/** Every section but the WAN one, in order. */
async function sections(mode: keyof typeof SIZES, dir: string, pki: BenchPki): Promise<Row[]> {
  const z = SIZES[mode];
  const procs: Proc[] = [];
  const bench = new Bench(pki, dir);
  const out: Row[] = [];
  try {
    await goDriver();
    const target = startProc('target', process.execPath, [
      '--import',
      'tsx',
      new URL('target.ts', import.meta.url).pathname,
    ]);
    procs.push(target);
    const ports = await firstJsonLine<{ source: number; echo: number }>(target);
    const t: Targets = {
      source: `127.0.0.1:${ports.source}`,
      echo: `127.0.0.1:${ports.echo}`,
      refused: `127.0.0.1:${await freePort()}`,
    };

    /** Runs `measure` for every path, alternating paths within each repetition; medians per path. */
    const alternate = async (
      name: string,
      reps: number,
      fresh: boolean,
      paths: PathName[],
      measure: (d: Dialer, stack?: Stack) => Promise<number>,
    ): Promise<Partial<Record<PathName, number>>> => {
      const got: Partial<Record<PathName, number[]>> = {};
      for (let r = 0; r < reps; r++) {
        for (const p of paths) {
          const { d, stack } = await bench.dialer(p, fresh);
          const v = await measure(d, stack);
          (got[p] ??= []).push(v);
          log(`${name} rep ${r + 1}/${reps} ${p}: ${v.toFixed(3)}`);
        }
      }
      return Object.fromEntries(Object.entries(got).map(([p, xs]) => [p, median(xs)]));
    };

    // The speed scenarios run the Go driver (go-driver.ts); the others the TypeScript one (driver.ts).
    for (const p of PATHS) await throughput(await bench.goPath(p), t.source, 4, 8 * MiB); // JIT and buffers warm, untimed
    const bulk =
      (conns: number, bytes: number) =>
      async (d: Dialer): Promise<number> =>
        throughput(await bench.goPath(d.path), t.source, conns, bytes);
    // CPU each tunnel process spends per MiB it carries during throughput-1: what the ratio is
    // made of, and steadier than MiB/s on a shared host (the driver and target cost the same on
    // every path).
    const cpuPerMiB: Record<'server' | 'agent', Partial<Record<PathName, number[]>>> = { server: {}, agent: {} };
    const bulk1 = async (d: Dialer): Promise<number> => {
      const pids = d.path === 'direct' ? [] : (await bench.stack(VIA[d.path].stack)).pids;
      const before = pids.map(cpuMs);
      const v = await bulk(1, z.bulk1)(d);
      pids.forEach((pid, i) =>
        (cpuPerMiB[i === 0 ? 'server' : 'agent'][d.path] ??= []).push((cpuMs(pid) - before[i]!) / (z.bulk1 / MiB)),
      );
      return v;
    };
    out.push(...rows('throughput-1', 'MiB/s', await alternate('throughput-1', z.tputReps, false, PATHS, bulk1)));
    for (const side of ['server', 'agent'] as const) {
      const m = Object.fromEntries(Object.entries(cpuPerMiB[side]).map(([p, xs]) => [p, median(xs)])) as Partial<
        Record<PathName, number>
      >;
      out.push(...rows(`throughput-1 cpu (${side})`, 'ms/MiB', m, false));
    }
    out.push(
      ...rows('throughput-16', 'MiB/s', await alternate('throughput-16', z.tputReps, false, PATHS, bulk(16, z.bulk16))),
    );

    // The floor: the same client dialing a ProxyService inside the driver that answers at once
    // (go-driver/floor.go). What a proxy adds to a dial is its figure minus the floor.
    const samples: Partial<Record<PathName, number[]>> = {};
    const floor: number[] = [];
    for (let done = 0; done < z.dials; done += z.dialChunk) {
      const n = Math.min(z.dialChunk, z.dials - done);
      for (const p of PATHS) (samples[p] ??= []).push(...(await dialLatencies(await bench.goPath(p), t.echo, n)));
      floor.push(...(await dialLatencies({ mode: 'floor' }, t.echo, n)));
      log(`dial-latency ${done + n}/${z.dials} per path`);
    }
    const pct = (p: number) =>
      Object.fromEntries(Object.entries(samples).map(([k, xs]) => [k, percentile(xs, p)])) as Partial<
        Record<PathName, number>
      >;
    for (const p of [50, 99]) {
      const [grpc, connect] = rows(`dial-latency-p${p}`, 'ms', pct(p));
      grpc!.note = `client floor ${percentile(floor, p).toFixed(2)} ms: the same Go client dialing an in-process ProxyService that answers at once`;
      out.push(grpc!, connect!);
    }

    const tunnels = PATHS.filter((p) => p !== 'direct');
    out.push(
      ...rows(
        'idle-memory-per-conn',
        'KiB',
        await alternate('idle-memory-per-conn', z.freshReps, z.fresh, tunnels, (d, s) =>
          idleMemoryPerConn(s!, d, t, z.idleConns),
        ),
        false,
      ),
    );
    const stuck: Partial<Record<PathName, number>> = {};
    out.push(
      ...rows(
        'leak-residual',
        'entries',
        await alternate('leak-residual', 1, z.fresh, tunnels, async (d, s) => {
          const r = await leakResidual(s!, d, t, z.leakCycles);
          stuck[d.path] = r.stuck;
          if (r.stuck)
            log(
              `leak-residual ${d.path}: ${r.stuck} of ${z.leakCycles} cycles stalled for 3 s and were cut off by the driver: ${JSON.stringify(r.stuckKinds)}`,
            );
          return r.residual;
        }),
        false,
      ),
    );
    const stalledRows = out.filter((r) => r.scenario.startsWith('leak-residual'));
    for (const r of stalledRows) {
      const [kctl, upstream]: [PathName, PathName] = r.scenario.endsWith('(http-connect)')
        ? ['kctl-connect', 'upstream-connect']
        : ['kctl', 'upstream'];
      const parts = [`kctl ${stuck[kctl] ?? 0}`, `upstream ${stuck[upstream] ?? 0}`];
      r.note = `cycles that stalled 3 s and were cut off by the driver: ${parts.join(', ')} of ${z.leakCycles}`;
    }
    out.push(
      ...rows(
        'hol-others-ratio',
        'ratio',
        await alternate('hol-others-ratio', z.freshReps, z.fresh, PATHS, (d) =>
          holOthersRatio(d, t, z.holConns, z.holWindowMs),
        ),
      ),
    );
    await bench.stop();

    const exe = await executableFigures(dir, log, mode === 'smoke' ? 1 : 3);
    out.push({
      scenario: 'kctl-size-mb',
      unit: 'MiB',
      kctl: exe.sizeMiB,
      upstream: null,
      direct: null,
      note: 'dist/kctl: the Node runtime and bundled JS, the component binaries zstd-compressed, the image tarballs',
    });
    out.push({
      scenario: 'first-start-staging-s',
      unit: 's',
      kctl: median(exe.stagingSeconds),
      upstream: null,
      direct: null,
      note: `kctl controller --init-only on a fresh data dir and runtime directory (runtime unpacked, controller binaries decompressed and checked, PKI made)${exe.stagingSeconds.length > 1 ? `; median of ${exe.stagingSeconds.map((x) => x.toFixed(2)).join(', ')} s` : ''}`,
    });
    if (z.controller) {
      const ctlDir = await mkdtemp(join(dir, 'controller-'));
      const f = await controllerFigures(ctlDir, log);
      out.push({ scenario: 'controller-ready-s', unit: 's', kctl: f.readySeconds, upstream: null, direct: null });
      out.push({
        scenario: 'controller-rss-mb',
        unit: 'MiB',
        kctl: f.rssMiB,
        upstream: null,
        direct: null,
        note: `idle, one agent connected, manifest applier running with the add-on stacks applied; of which ${f.anonMiB.toFixed(0)} MiB anonymous (heaps), the rest is the executable's file-backed code pages`,
      });
    } else {
      const note = 'not measured in --smoke (starts the whole control plane)';
      out.push({ scenario: 'controller-ready-s', unit: 's', kctl: null, upstream: null, direct: null, note });
      out.push({ scenario: 'controller-rss-mb', unit: 'MiB', kctl: null, upstream: null, direct: null, note });
    }
    if (mode !== 'smoke') {
      // ~30 s per lab plus ~6 s per join: 3 joins (median) in the full run, 1 in --quick.
      const { joins, corednsReadySeconds, workerRssMiB, workerHostMiB } = await workerJoinSeconds(
        await mkdtemp(join(dir, 'worker-')),
        log,
        mode === 'full' ? 3 : 1,
      );
      out.push({
        scenario: 'worker-join-s',
        unit: 's',
        kctl: median(joins),
        upstream: null,
        direct: null,
        ...(joins.length > 1
          ? { note: `median of ${joins.length} joins: ${joins.map((s) => s.toFixed(1)).join(', ')} s` }
          : {}),
      });
      out.push({
        scenario: 'worker-rss-mb',
        unit: 'MiB',
        kctl: workerRssMiB.length ? median(workerRssMiB) : null,
        upstream: null,
        direct: null,
        note: 'the kctl worker process alone (its containerd, kubelet and kube-proxy children aside), one node, idle 10 s after "worker ready", agent connected',
      });
      out.push({
        scenario: 'worker-host-mb',
        unit: 'MiB',
        kctl: workerHostMiB.length ? median(workerHostMiB) : null,
        upstream: null,
        direct: null,
        note: 'the whole worker: distinct resident pages of the kctl worker process, containerd and its shims, kubelet and kube-proxy (the pods aside), each page once, read right after worker-rss-mb; the k3s agent figure the target is set against is 275 MB',
      });
      out.push({
        scenario: 'coredns-ready-s',
        unit: 's',
        kctl: corednsReadySeconds,
        upstream: null,
        direct: null,
        note: 'controller start to the first CoreDNS replica Ready, one worker joining as soon as the API is up',
      });
      const ha = await haFigures(dir, log);
      out.push({
        scenario: 'ha-failover-exec-s',
        unit: 's',
        kctl: ha.failoverExecSeconds,
        upstream: null,
        direct: null,
        note: 'SIGKILL of every process of one of three controllers to the first kubectl exec through a survivor',
      });
      out.push({
        scenario: 'ha-agent-join-s',
        unit: 's',
        kctl: ha.agentJoinSeconds,
        upstream: null,
        direct: null,
        note: "a third controller's start (join by token included) to the worker's agent holding a stream to it",
      });
      const tenants = await tenantFigures(dir, log, mode === 'full' ? [1, 10, 20] : [1, 10]);
      const full = tenants.full.memoryMiB;
      for (const r of tenants.rounds) {
        const what = r.tenants === 1 ? 'one api-only tenant alone' : `${r.tenants} api-only tenants started together`;
        out.push({
          scenario: `tenant-ready-s (${r.tenants})`,
          unit: 's',
          kctl: r.readySeconds,
          upstream: null,
          direct: null,
          note: `${what} (first start: PKI made, ports picked): spawn of kctl controller --name to /readyz 200${r.tenants > 1 ? ', the slowest' : ''}`,
        });
        out.push({
          scenario: `tenant-restart-s (${r.tenants})`,
          unit: 's',
          kctl: r.restartSeconds,
          upstream: null,
          direct: null,
          note: `the same ${r.tenants === 1 ? 'tenant' : `${r.tenants} tenants`} stopped and started again${r.tenants > 1 ? ' together' : ''} (PKI, ports and data kept): spawn to /readyz 200${r.tenants > 1 ? ', the slowest' : ''}`,
        });
        out.push({
          scenario: `tenant-memory-mb (${r.tenants})`,
          unit: 'MiB',
          kctl: r.memoryMiB,
          upstream: null,
          direct: null,
          note: `${what}: PSS per tenant (kctl, kine, kube-apiserver, kube-controller-manager) with a CRD and 1,000 objects; a full-profile controller on kine measured the same way: ${full.toFixed(0)} MiB (${(r.memoryMiB / full).toFixed(2)}x)`,
        });
      }
    } else {
      const note = 'not measured in --smoke (starts a control plane and a worker in the network-namespace lab)';
      out.push({ scenario: 'worker-join-s', unit: 's', kctl: null, upstream: null, direct: null, note });
      out.push({ scenario: 'worker-rss-mb', unit: 'MiB', kctl: null, upstream: null, direct: null, note });
      out.push({ scenario: 'worker-host-mb', unit: 'MiB', kctl: null, upstream: null, direct: null, note });
      out.push({ scenario: 'coredns-ready-s', unit: 's', kctl: null, upstream: null, direct: null, note });
      out.push({ scenario: 'ha-failover-exec-s', unit: 's', kctl: null, upstream: null, direct: null, note });
      out.push({ scenario: 'ha-agent-join-s', unit: 's', kctl: null, upstream: null, direct: null, note });
      for (const n of [1, 10]) {
        out.push({ scenario: `tenant-ready-s (${n})`, unit: 's', kctl: null, upstream: null, direct: null, note });
        out.push({ scenario: `tenant-restart-s (${n})`, unit: 's', kctl: null, upstream: null, direct: null, note });
        out.push({ scenario: `tenant-memory-mb (${n})`, unit: 'MiB', kctl: null, upstream: null, direct: null, note });
      }
    }
  } finally {
    await bench.stop().catch(() => {});
    for (const p of procs) await p.stop();
  }
  return out;
}

main().then(
  () => process.exit(0),
  (err: Error) => {
    process.stderr.write(`bench failed: ${err.message}\n`);
    if (process.argv.includes('--debug')) process.stderr.write(`${err.stack}\n`);
    process.exit(1);
  },
);
