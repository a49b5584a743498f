// Runs a test tier (test/README.md, "Tiers") or the files and folders named:
//   tsx test/run.ts unit    unit files in parallel: no root, no build
//   tsx test/run.ts core    unit, then the core e2e files (`npm test`; its pretest builds first)
//   tsx test/run.ts all     every unit, e2e and bench file (`npm run test:all`)
//   tsx test/run.ts ci-rest the other files, as many as fit into the CI budget (`.ci/run`, after `npm test`)
//   tsx test/run.ts FILE|FOLDER...
// E2E files run one at a time in the main lane; files with their own lab (long, upgrade and the
// LAST_BESIDE HA files: tiers.ts) run in a second lane beside it, and that lane's report is printed
// when the main lane is done. Each file's time and result are recorded (tiers.ts history).
import { type ChildProcess, spawn } from 'node:child_process';
import { messageOf } from '../src/base/errors.ts';
import { failureSummary } from './failures.ts';
import {
  CORE_E2E,
  LAST_BESIDE,
  TIERS,
  isLong,
  needsTestBuilds,
  pickForBudget,
  readHistory,
  recordRun,
  root,
  runsBeside,
  slowFirst,
  testFiles,
  type Tier,
} from './tiers.ts';

// A test that hangs fails after this instead of holding the whole run (the longest e2e test takes ~13 min);
// --test-force-exit ends a test file whose tests are done even if a handle (a stray child, a timer) lingers.
const TEST_TIMEOUT_MS = 15 * 60_000;
/** A long test waits on the clock for up to ~30 min by design. */
const LONG_TEST_TIMEOUT_MS = 45 * 60_000;
/** Unit files at once: most of their time is waiting on timers, so more than the two cores. */
const UNIT_CONCURRENCY = 8;
/** `.ci/run` ends within this on a warm machine, counted from its start (KCTL_CI_STARTED, epoch seconds). */
const CI_BUDGET_MS = 50 * 60_000;
/** Kept free at the end of a CI run: reports, and a file that takes a little longer than last time. */
const CI_MARGIN_MS = 3 * 60_000;

const testArgs = (timeoutMs: number, concurrency: number, files: string[]): string[] => [
  '--import',
  'tsx',
  '--test',
  `--test-concurrency=${concurrency}`,
  `--test-timeout=${timeoutMs}`,
  '--test-force-exit',
  '--test-reporter=spec',
  ...files,
];

/** A test process's exit status and output; `echo` also passes the output on as it comes. */
function collect(child: ChildProcess, echo = false): Promise<{ status: number; output: string }> {
  const chunks: Buffer[] = [];
  const take = (c: Buffer, to: NodeJS.WriteStream) => {
    chunks.push(c);
    if (echo) to.write(c);
  };
  child.stdout!.on('data', (c: Buffer) => take(c, process.stdout));
  child.stderr!.on('data', (c: Buffer) => take(c, process.stderr));
  return new Promise((resolve) =>
    child.on('close', (code) => resolve({ status: code ?? 1, output: Buffer.concat(chunks).toString() })),
  );
}

/** What each group's failures said, printed again at the very end, where a log's tail shows them. */
const failures: string[] = [];
interface LaneResult {
  status: number;
  report: string;
}
const worst = (a: LaneResult, b: LaneResult): LaneResult => ({
  status: a.status || b.status,
  report: a.report + b.report,
});

/** One test process over `files`; `echo` passes its output on as it comes, else it is kept for the report at the end. */
async function testRun(
  name: string,
  files: string[],
  opts: { timeoutMs: number; concurrency: number; echo: boolean },
): Promise<LaneResult> {
  if (!files.length) return { status: 0, report: '' };
  const started = Date.now();
  const child = spawn(process.execPath, testArgs(opts.timeoutMs, opts.concurrency, files), {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, FORCE_COLOR: '0' },
  });
  const { status, output } = await collect(child, opts.echo);
  // One file per process gives its time; a group's time is the group's.
  if (files.length === 1)
    recordRun(files[0]!, {
      at: new Date(started).toISOString(),
      durationMs: Date.now() - started,
      passed: status === 0,
    });
  if (status !== 0) failures.push(failureSummary(name, output));
  return { status, report: opts.echo ? '' : `\n# ${name} (${files.join(', ')}):\n${output}` };
}

/** Files one process each, `concurrency` at a time (e2e files of one lane). */
async function eachFile(
  name: string,
  files: string[],
  opts: { timeoutMs: (f: string) => number; concurrency: number; echo: boolean },
) {
  const queue = [...files];
  let result: LaneResult = { status: 0, report: '' };
  const worker = async () => {
    for (let f = queue.shift(); f !== undefined; f = queue.shift()) {
      const r = await testRun(`${name}: ${f}`, [f], { timeoutMs: opts.timeoutMs(f), concurrency: 1, echo: opts.echo });
      // After the await, not before it: files that ended meanwhile are in `result` now (reading it
      // first dropped their reports when long tests ran three at once).
      result = worst(result, r);
    }
  };
  await Promise.all(Array.from({ length: Math.min(opts.concurrency, files.length) }, worker));
  return result;
}

const timeoutFor = (f: string): number => (isLong(f) ? LONG_TEST_TIMEOUT_MS : TEST_TIMEOUT_MS);

// The upgrade tests need the test builds (an older kctl with the previous Kubernetes release, one
// that cannot start: assets/build-test-kctls.ts). On a fresh machine the older Kubernetes takes
// about 10 minutes to compile, so they are built beside the main lane from its start, at the lowest
// CPU and I/O priority: at full priority, writing three 160 MB executables stalled the tests that
// start their clusters at the same time (two long tests saw logs and exec fail for 35 s at once).
function testBuilds(): Promise<{ status: number; output: string }> {
  const child = spawn('nice', ['-n', '19', 'ionice', '-c', '3', 'npx', 'tsx', 'assets/build-test-kctls.ts'], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return collect(child).catch((e: unknown) => ({ status: 1, output: messageOf(e) }));
}

// The long tests start once the test builds are done, or after LONG_TESTS_WAIT_MS at the latest
// (two long tests' clusters stalled at once while the builds wrote their executables, 2026-11-27;
// `ionice -c 3` does nothing on a disk whose scheduler is not BFQ). With the builds' Go parts
// cached they take 3-4 minutes; on a fresh machine the long tests start beside the compile.
const LONG_TESTS_WAIT_MS = 5 * 60_000;
// Three long tests at a time, not all six: with six clusters coming up at once beside the main
// lane, a kubelet restarted by the CA rotation answered exec with "pod does not exist" for 25 s
// (2026-11-27).
const LONG_CONCURRENCY = 3;

/**
 * The lane beside the main one: the long tests, then the upgrade tests one at a time (they start
 * five hosts and restart every member, so they wait until the long tests' clusters are gone), then
 * the LAST_BESIDE files one at a time.
 */
async function besideLane(files: string[]): Promise<LaneResult> {
  const long = files.filter(isLong);
  const upgrade = files.filter((f) => needsTestBuilds(f) && !isLong(f));
  const last = files.filter((f) => LAST_BESIDE.includes(f));
  const built = upgrade.length ? testBuilds() : Promise.resolve({ status: 0, output: '' });
  if (long.length && upgrade.length)
    await Promise.race([built, new Promise((resolve) => setTimeout(resolve, LONG_TESTS_WAIT_MS).unref())]);
  let result = await eachFile('long tests', long, {
    timeoutMs: timeoutFor,
    concurrency: LONG_CONCURRENCY,
    echo: false,
  });
  if (upgrade.length) {
    const b = await built;
    result.report += `\n# the test builds (for ${upgrade.join(', ')}):\n${b.output.split('\n').slice(-6).join('\n')}\n`;
    if (b.status !== 0) {
      failures.push(`## the test builds failed (exit ${b.status}):\n${b.output.split('\n').slice(-20).join('\n')}`);
      result.status ||= b.status;
    } else
      result = worst(
        result,
        await eachFile('upgrade tests', upgrade, { timeoutMs: timeoutFor, concurrency: 1, echo: false }),
      );
  }
  return worst(result, await eachFile('HA tests beside', last, { timeoutMs: timeoutFor, concurrency: 1, echo: false }));
}

const unitRun = (files = testFiles('test/unit')): Promise<LaneResult> =>
  testRun('unit tests', slowFirst(files), { timeoutMs: TEST_TIMEOUT_MS, concurrency: UNIT_CONCURRENCY, echo: true });
const mainLane = (files: string[]): Promise<LaneResult> =>
  eachFile('e2e', files, { timeoutMs: timeoutFor, concurrency: 1, echo: true });

/** Main lane and the lane beside at once; the beside lane's report comes after the main lane's output. */
async function bothLanes(main: () => Promise<LaneResult>, beside: string[]): Promise<LaneResult> {
  if (beside.length) process.stdout.write(`# running beside the others, report at the end: ${beside.join(', ')}\n`);
  const side = besideLane(beside);
  const m = await main();
  const s = await side;
  process.stdout.write(s.report);
  return worst(m, s);
}

/**
 * CI, after `npm test`: the other files, as many as fit into the budget (the rule is
 * pickForBudget's), in both lanes at once.
 */
async function ciRest(): Promise<LaneResult> {
  const started = Number(process.env.KCTL_CI_STARTED ?? 0) * 1000 || Date.now();
  const deadline = started + CI_BUDGET_MS - CI_MARGIN_MS;
  const rest = [...testFiles('test/e2e'), ...testFiles('bench')].filter((f) => !CORE_E2E.includes(f));
  const history = readHistory();
  const left = deadline - Date.now();
  const beside = pickForBudget(rest.filter(runsBeside), history, left);
  const main = pickForBudget(
    rest.filter((f) => !runsBeside(f)),
    history,
    left,
  );
  process.stdout.write(
    `# CI: ${Math.round(left / 60_000)} min left of the budget; picked: ${[...main, ...beside].join(', ') || 'nothing fits'}\n`,
  );
  return bothLanes(() => mainLane(main), beside);
}

async function run(args: string[]): Promise<LaneResult> {
  const tier = args.length === 1 && TIERS.includes(args[0] as Tier) ? (args[0] as Tier) : undefined;
  if (tier === 'unit') return unitRun();
  if (tier === 'core') return worst(await unitRun(), await mainLane(CORE_E2E));
  if (tier === 'ci-rest') return ciRest();
  const named = tier === 'all' || !args.length ? ['test/unit', 'test/e2e', 'bench'] : args;
  const files = named.flatMap((s) => (s.endsWith('.ts') ? [s] : testFiles(s)));
  const units = files.filter((f) => f.startsWith('test/unit/'));
  const e2e = files.filter((f) => !units.includes(f));
  // No unit file named: unitRun has nothing to run and passes.
  return bothLanes(
    async () => worst(await unitRun(units), await mainLane(e2e.filter((f) => !runsBeside(f)))),
    e2e.filter(runsBeside),
  );
}

const started = Date.now();
const result = await run(process.argv.slice(2));
if (failures.length)
  process.stdout.write(`\n# what failed, in short (stack frames left out):\n${failures.join('\n')}\n`);
process.stdout.write(
  `\n# ${process.argv.slice(2).join(' ') || 'all'}: ${result.status === 0 ? 'passed' : 'FAILED'} in ${((Date.now() - started) / 60_000).toFixed(1)} min\n`,
);
process.exit(result.status);
