// The bench harness runs end to end at tiny sizes and reports every scenario in the promised
// shape. No speed is asserted here: timed figures belong to `npm run bench`.
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { execa } from 'execa';
import { goDriver } from './go-driver.ts';

const SCENARIOS = [
  'throughput-1',
  'throughput-1 cpu (server)',
  'throughput-1 cpu (agent)',
  'throughput-16',
  'dial-latency-p50',
  'dial-latency-p99',
  'idle-memory-per-conn',
  'hol-others-ratio',
  'leak-residual',
];
const KCTL_ONLY = [
  'kctl-size-mb',
  'first-start-staging-s',
  'worker-rss-mb',
  'worker-host-mb',
  'controller-ready-s',
  'controller-rss-mb',
  'worker-join-s',
  'coredns-ready-s',
  'ha-failover-exec-s',
  'ha-agent-join-s',
  ...[1, 10].flatMap((n) => [`tenant-ready-s (${n})`, `tenant-restart-s (${n})`, `tenant-memory-mb (${n})`]),
];
/** Figures that may be 0 or negative in a tiny run (memory deltas at 20 connections are noise; 4 MiB may take under one 10 ms CPU tick). */
const MAY_BE_ZERO = [
  'leak-residual',
  'idle-memory-per-conn',
  'hol-others-ratio',
  'throughput-1 cpu (server)',
  'throughput-1 cpu (agent)',
];
/** Figures with no direct path. */
const NO_DIRECT = ['idle-memory-per-conn', 'leak-residual', 'throughput-1 cpu (server)', 'throughput-1 cpu (agent)'];

interface Row {
  scenario: string;
  unit: string;
  kctl: number | null;
  upstream: number | null;
  direct: number | null;
  note?: string;
}

/**
 * Only a guard against a hang: a smoke run takes 50-80 s on a quiet machine, and well over 100 s
 * while the long e2e tests start their clusters beside it (CI killed one at 110 s).
 */
const SMOKE_TIMEOUT_MS = 300_000;

/**
 * bench/run.ts in its own process group; whatever of the group is left afterwards (the servers
 * and agents of a run killed at the timeout) is killed with it.
 */
async function benchRun(args: string[]) {
  const run = execa(process.execPath, ['--import', 'tsx', new URL('run.ts', import.meta.url).pathname, ...args], {
    reject: false,
    timeout: SMOKE_TIMEOUT_MS,
    detached: true,
  });
  try {
    return await run;
  } finally {
    try {
      if (run.pid) process.kill(-run.pid, 'SIGKILL');
    } catch {
      // the group is empty: nothing was left
    }
  }
}

// The Go driver's first build on a machine (module downloads, compile) is not the run's to pay.
before(() => goDriver(), { timeout: 600_000 });

test(
  'bench --smoke --json reports every scenario for kctl, upstream and direct',
  { timeout: SMOKE_TIMEOUT_MS + 10_000 },
  async () => {
    const r = await benchRun(['--smoke', '--json']);
    assert.equal(r.exitCode, 0, `bench failed:\n${String(r.stderr).slice(-3000)}`);
    const { runs } = JSON.parse(String(r.stdout)) as { runs: Row[] };
    assert.deepEqual(
      runs.map((x) => x.scenario).sort(),
      [...SCENARIOS.flatMap((s) => [s, `${s} (http-connect)`]), ...KCTL_ONLY].sort(),
    );
    for (const row of runs) {
      assert.equal(typeof row.unit, 'string');
      for (const k of ['kctl', 'upstream', 'direct'] as const) assert.ok(k in row, `${row.scenario}: no ${k} key`);
      if (KCTL_ONLY.includes(row.scenario)) {
        assert.ok(
          row.kctl === null ? typeof row.note === 'string' : Number.isFinite(row.kctl) && row.kctl > 0,
          `${row.scenario}: kctl ${row.kctl}`,
        );
        continue;
      }
      const base = row.scenario.replace(' (http-connect)', '');
      const check = (k: 'kctl' | 'upstream' | 'direct'): void => {
        const v = row[k];
        assert.ok(typeof v === 'number' && Number.isFinite(v), `${row.scenario}: ${k} is ${v}`);
        if (!MAY_BE_ZERO.includes(base)) assert.ok(v > 0, `${row.scenario}: ${k} is ${v}`);
      };
      check('kctl');
      check('upstream');
      if (!NO_DIRECT.includes(base)) check('direct');
      if (base === 'leak-residual') assert.ok(row.kctl! >= 0 && (row.upstream ?? 0) >= 0);
      if (/^dial-latency-p\d+$/.test(row.scenario))
        assert.match(row.note ?? '', /^client floor \d+\.\d\d ms/, row.scenario);
    }
  },
);

test(
  'bench --wan --smoke --json reports the WAN section for kctl and upstream alone',
  { timeout: SMOKE_TIMEOUT_MS + 10_000 },
  async () => {
    const r = await benchRun(['--wan', '--smoke', '--json']);
    assert.equal(r.exitCode, 0, `bench failed:\n${String(r.stderr).slice(-3000)}`);
    const { runs } = JSON.parse(String(r.stdout)) as { runs: Row[] };
    const restart = 'restart-20-agents';
    const suffixes = [
      's',
      'after-listen-s',
      'spread-s',
      'server-cpu-ms',
      'agents-cpu-ms',
      'server-peak-mb',
      'server-growth-mb',
    ];
    // The partition figures take 30 s and more: --smoke names them without figures.
    // So does a cluster across the link (kubectl cp, logs -f).
    const partitions = [
      'wan-dead-server-s',
      'wan-dead-agent-s',
      'wan-first-dial-after-heal-s',
      'wan-dial-during-partition-s',
    ];
    const cluster = ['wan-kubectl-cp-mibs', 'wan-kubectl-logs-f-mibs'];
    const edge = ['wan-throughput-1-mibs', 'wan-throughput-beside-stalled-mibs', 'wan-dial-p50-ms'];
    // Beside a stream nobody reads, upstream may deliver nothing at all: the others must deliver.
    const mayBeZero = (scenario: string, k: string): boolean =>
      scenario === 'wan-throughput-beside-stalled-mibs' && k === 'upstream';
    assert.deepEqual(
      runs.map((x) => x.scenario),
      [...suffixes.map((s) => `${restart}-${s}`), ...partitions, ...edge, ...cluster],
    );
    const by = new Map(
      runs.map((x) => [x.scenario.startsWith(restart) ? x.scenario.slice(restart.length + 1) : x.scenario, x]),
    );
    for (const s of ['s', 'after-listen-s', 'spread-s', 'server-peak-mb'] as const)
      for (const k of ['kctl', 'upstream'] as const) assert.ok(by.get(s)![k]! > 0, `${s}: ${k} is ${by.get(s)![k]}`);
    for (const row of runs) {
      if (partitions.includes(row.scenario) || cluster.includes(row.scenario)) {
        assert.deepEqual([row.kctl, row.upstream, row.direct], [null, null, null], row.scenario);
        assert.match(row.note ?? '', /not measured with --smoke/, row.scenario);
        continue;
      }
      const columns = edge.includes(row.scenario)
        ? (['kctl', 'upstream', 'direct'] as const)
        : (['kctl', 'upstream'] as const);
      if (!edge.includes(row.scenario)) assert.equal(row.direct, null, row.scenario);
      for (const k of columns) {
        const v = row[k];
        assert.ok(typeof v === 'number' && Number.isFinite(v) && v >= 0, `${row.scenario}: ${k} is ${v}`);
        if (edge.includes(row.scenario) && !mayBeZero(row.scenario, k))
          assert.ok(v > 0, `${row.scenario}: ${k} is ${v}`);
      }
    }
    for (const k of ['kctl', 'upstream'] as const) {
      const v = (s: string): number => by.get(s)![k]!;
      // Agents come back after the new server's spawn: the harness's clock and the agents' agree.
      assert.ok(v('after-listen-s') <= v('s'), `${k}: ${JSON.stringify(runs)}`);
      // A dial across the edge link takes at least its round trips (RTT 150 ± 20 ms): to the agent and back, the echo.
      assert.ok(v('wan-dial-p50-ms') >= 250, `${k}: wan-dial-p50-ms ${v('wan-dial-p50-ms')}`);
    }
    // No download across a 20 Mbit/s link gets more than 2.38 MiB/s.
    for (const s of ['wan-throughput-1-mibs', 'wan-throughput-beside-stalled-mibs'])
      for (const k of ['kctl', 'upstream', 'direct'] as const) assert.ok(by.get(s)![k]! < 2.4, `${s}: ${k}`);
    assert.match(
      by.get('wan-throughput-beside-stalled-mibs')!.note ?? '',
      /finished: kctl 1\/1,/,
      'kctl finished its download beside the stalled stream',
    );
  },
);
