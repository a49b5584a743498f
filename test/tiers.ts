// The test tiers (test/README.md, "Tiers"): which files each tier runs, what each file took when it
// last ran on this machine, and the rule that picks what else fits into a CI run's time.
import { readFileSync, writeFileSync, mkdirSync, readdirSync, statSync, renameSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { cacheRoot } from '../src/payload/manifest.ts';

export const root = new URL('..', import.meta.url).pathname;

export type Tier = 'unit' | 'core' | 'all' | 'ci-rest';
export const TIERS: readonly Tier[] = ['unit', 'core', 'all', 'ci-rest'];

/** The e2e files of `npm test`: the promises everything else stands on. */
export const CORE_E2E = [
  // a controller comes up, serves the API, tokens, status, restarts
  'test/e2e/controller/controller.test.ts',
  // a worker joins by token, runs pods, logs and exec reach them through the tunnel
  'test/e2e/worker/worker.test.ts',
  // one hostile node or leaked worker token gets its own node and nothing more
  'test/e2e/konnectivity/tunnel-trust.test.ts',
  // the drop-in agent and server, for clusters kctl did not make
  'test/e2e/konnectivity/agent-dropin.test.ts',
  'test/e2e/konnectivity/server-dropin.test.ts',
  // the conformance suite's specs for each path through the tunnel (the whole suite: npm run conformance)
  'test/e2e/conformance/smoke.test.ts',
];

/**
 * Unit files that take longest (most of it waiting on timers, or CPU in the 10,000-cycle leak
 * test), started first so that the parallel run does not end waiting on one of them.
 */
export const SLOW_UNIT_FILES = [
  'test/unit/supervisor/handover.test.ts',
  'test/unit/konnectivity/target-close.test.ts',
  'test/unit/konnectivity/leak.test.ts',
  'test/unit/controller/join/join-server.test.ts',
  'test/unit/konnectivity/flow.test.ts',
  'test/unit/controller/backups/backup-schedule.test.ts',
  'test/unit/konnectivity/ha.test.ts',
  'test/unit/konnectivity/pre-auth.test.ts',
];

/**
 * Two of the longest files (10-13 min each on a loaded machine) that have their own labs: in a
 * full run they go in the lane beside, after its long and upgrade tests.
 */
export const LAST_BESIDE = ['test/e2e/ha/ha.test.ts', 'test/e2e/ha/ha-kine.test.ts'];

export const isLong = (f: string): boolean => f.endsWith('.long.test.ts');
export const needsTestBuilds = (f: string): boolean => f.startsWith('test/e2e/upgrade/');
/** Files with their own lab (names, nothing in the root namespace): they may run beside the others. */
export const runsBeside = (f: string): boolean => isLong(f) || needsTestBuilds(f) || LAST_BESIDE.includes(f);

/** Every *.test.ts under `dir` (relative to the repository), sorted. */
export function testFiles(dir: string): string[] {
  return readdirSync(join(root, dir))
    .flatMap((name) => {
      const p = join(root, dir, name);
      if (statSync(p).isDirectory()) return testFiles(relative(root, p));
      return name.endsWith('.test.ts') ? [relative(root, p)] : [];
    })
    .sort();
}

/** Unit files with the slow ones first. */
export const slowFirst = (files: string[]): string[] => [
  ...SLOW_UNIT_FILES.filter((f) => files.includes(f)),
  ...files.filter((f) => !SLOW_UNIT_FILES.includes(f)),
];

/** One file's last run on this machine. */
export interface FileRun {
  at: string;
  durationMs: number;
  passed: boolean;
  /** Its last few durations, newest last (a file's time varies with what runs beside it). */
  recentMs?: number[];
}
export type History = Record<string, FileRun>;

/** Kept outside the checkout, beside the component cache: a fresh clone on the same machine sees it. */
export const historyPath = (): string => join(cacheRoot(), 'test-history.json');

export function readHistory(): History {
  try {
    return JSON.parse(readFileSync(historyPath(), 'utf8')) as History;
  } catch {
    return {};
  }
}

/** Records one run (read again first: two lanes record side by side). */
export function recordRun(file: string, run: FileRun): void {
  const before = readHistory();
  const recentMs = [...(before[file]?.recentMs ?? []), run.durationMs].slice(-RECENT_RUNS);
  const history = { ...before, [file]: { ...run, recentMs } };
  mkdirSync(dirname(historyPath()), { recursive: true });
  const tmp = `${historyPath()}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(history, null, 1)}\n`);
  renameSync(tmp, historyPath());
}

/** How many of a file's durations are kept. */
const RECENT_RUNS = 3;

/** What a file is expected to take when this machine never ran it: long files wait on the clock for up to ~25 min. */
const UNKNOWN_MS = { long: 25 * 60_000, other: 10 * 60_000 };

/**
 * The slowest of a file's recent runs here: a file's time varies with what runs beside it (the
 * upgrade test took 16.7 min beside the main lane in CI, 2026-11-30, and that run ended 11 min
 * past its budget), so one quick run does not make it look cheap.
 */
export const expectedMs = (file: string, history: History): number => {
  const ran = history[file];
  if (!ran) return isLong(file) ? UNKNOWN_MS.long : UNKNOWN_MS.other;
  return Math.max(ran.durationMs, ...(ran.recentMs ?? []));
};

/**
 * The CI rule for the files beyond `npm test`: the ones this machine ran least recently come first
 * (never run before all others, then by name), and each is taken when its last duration here (or
 * the estimate above) fits into what is left of the budget; one that does not fit is passed over,
 * so a shorter one behind it may still run. Over a few CI runs every file takes its turn.
 */
export function pickForBudget(candidates: string[], history: History, budgetMs: number): string[] {
  const lastRun = (f: string) => (history[f] ? Date.parse(history[f].at) : 0);
  const ordered = [...candidates].sort((a, b) => lastRun(a) - lastRun(b) || a.localeCompare(b));
  const picked: string[] = [];
  let left = budgetMs;
  for (const f of ordered) {
    const need = expectedMs(f, history);
    if (need > left) continue;
    picked.push(f);
    left -= need;
  }
  return picked;
}
