// The whole suite: unit tests (fakes, fast), then end-to-end tests against dist/kctl and the
// real component binaries. `npm test` builds what it needs first (see package.json pretest).
//
// Files named *.long.test.ts spend most of their time waiting on the clock (certificate
// renewals, scheduled backups) or on the restarts of a long scenario (a CA rotation): they run
// side by side with the rest, all at once, in a second
// test process whose report is printed when the main run is done. Such a file uses its own lab
// (its own names, nothing in the root namespace) and never touches processes it did not start.
import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { failureSummary } from './failures.ts';

const root = new URL('..', import.meta.url).pathname;

function testFiles(dir: string): string[] {
  return readdirSync(dir)
    .flatMap((name) => {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) return testFiles(p);
      return name.endsWith('.test.ts') ? [relative(root, p)] : [];
    })
    .sort();
}

// A test that hangs fails after this instead of holding the whole run (the longest e2e test takes ~2 min);
// --test-force-exit ends a test file whose tests are done even if a handle (a stray child, a timer) lingers.
const TEST_TIMEOUT_MS = 10 * 60_000;
/** A long test waits on the clock for up to ~30 min by design. */
const LONG_TEST_TIMEOUT_MS = 45 * 60_000;

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
  child.stdout!.on('data', (c: Buffer) => {
    chunks.push(c);
    if (echo) process.stdout.write(c);
  });
  child.stderr!.on('data', (c: Buffer) => {
    chunks.push(c);
    if (echo) process.stderr.write(c);
  });
  return new Promise((resolve) => child.on('close', (code) => resolve({ status: code ?? 1, output: Buffer.concat(chunks).toString() })));
}

const only = process.argv.slice(2);
const suites = only.length ? only : ['test/unit', 'test/e2e', 'bench'];
const files = suites.flatMap((s) => (s.endsWith('.ts') ? [s] : testFiles(join(root, s))));
const needsTestBuilds = (f: string): boolean => f.startsWith('test/e2e/upgrade/');
// Two of the longest files of the main run (10-13 min each on a loaded machine), run in the lane
// beside once its long and upgrade tests are done: that lane is then idle for the last ~40 minutes
// of the main run. Like the long tests, each has its own lab (its own names, nothing in the root
// namespace) and kills only processes it started.
const LAST_BESIDE = ['test/e2e/ha/ha.test.ts', 'test/e2e/ha/ha-kine.test.ts'];
const long = files.filter((f) => f.endsWith('.long.test.ts'));
const upgrade = files.filter((f) => needsTestBuilds(f) && !long.includes(f));
const lastBeside = files.filter((f) => LAST_BESIDE.includes(f));
const rest = files.filter((f) => !f.endsWith('.long.test.ts') && !upgrade.includes(f) && !lastBeside.includes(f));

/** What each group's failures said, printed again at the very end, where a log's tail shows them. */
const failures: string[] = [];
/** One test process; `echo` passes its output on as it comes, else it is printed as a report at the end. */
async function testRun(
  name: string,
  group: string[],
  opts: { timeoutMs: number; concurrency: number; echo: boolean },
): Promise<{ status: number; report: string }> {
  if (!group.length) return { status: 0, report: '' };
  const child = spawn(process.execPath, testArgs(opts.timeoutMs, opts.concurrency, group), {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, FORCE_COLOR: '0' },
  });
  const { status, output } = await collect(child, opts.echo);
  if (status !== 0) failures.push(failureSummary(name, output));
  return { status, report: opts.echo ? '' : `\n# ${name} (${group.join(', ')}):\n${output}` };
}

// The upgrade tests need the test builds (an older kctl with the previous Kubernetes release, one
// that cannot start: assets/build-test-kctls.ts). On a fresh machine the older Kubernetes takes
// about 10 minutes to compile, so they are built beside the main run from its start, at the lowest
// CPU and I/O priority: at full priority, writing three 160 MB executables stalled the tests that
// start their clusters at the same time (two long tests saw logs and exec fail for 35 s at once).
const built = upgrade.length
  ? new Promise<{ status: number; output: string }>((resolve) => {
      const child = spawn('nice', ['-n', '19', 'ionice', '-c', '3', 'npx', 'tsx', 'assets/build-test-kctls.ts'], {
        cwd: root,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      collect(child).then(resolve, (e: Error) => resolve({ status: 1, output: e.message }));
    })
  : Promise.resolve({ status: 0, output: '' });

// Beside the main run: the long tests (they mostly wait on the clock), then the upgrade tests one
// at a time, then LAST_BESIDE one at a time. The upgrade tests start five hosts and restart every
// member of a cluster, so they wait until the long tests' clusters are gone.
if (long.length || upgrade.length || lastBeside.length)
  process.stdout.write(`# running beside the others, report at the end: ${[...long, ...upgrade, ...lastBeside].join(', ')}\n`);
// The long tests start once the test builds are done, or after LONG_TESTS_WAIT_MS at the latest.
// Two long tests' clusters stalled at once (20-23 s without an answer, 2026-11-27) while the test
// builds wrote their executables, the likely cause (not proven); and `ionice -c 3` does nothing
// on a disk whose scheduler is not BFQ.
// Where the builds are cached (their Go parts) they take 3-4 minutes, so the long tests then run
// without them; on a fresh machine the long tests start after the wait, beside the compile. With
// the builds cached, both lanes ended within minutes of each other (a fresh-clone run of the whole
// suite: 61 min, 2026-11-28).
const LONG_TESTS_WAIT_MS = 5 * 60_000;
// Three long tests at a time, not all six: with six clusters coming up at once beside the main run,
// a kubelet restarted by the CA rotation answered exec with "pod does not exist" for 25 s
// (2026-11-27). In order, the two short ones (backup schedule, CA rotation: 4-8 min) and the HA
// renewal (about 20 min) start first; the WAN and leak tests (17-20 min) start as the short ones
// end, so the lane takes about 27 min, then the upgrade tests 7-17 and LAST_BESIDE about 25.
const LONG_CONCURRENCY = 3;
/** The long tests, then the upgrade tests (once their builds are done), then LAST_BESIDE. */
async function besideLane(): Promise<{ status: number; report: string }> {
  if (long.length && upgrade.length) await Promise.race([built, new Promise((resolve) => setTimeout(resolve, LONG_TESTS_WAIT_MS).unref())]);
  const longRun = await testRun('long tests', long, { timeoutMs: LONG_TEST_TIMEOUT_MS, concurrency: LONG_CONCURRENCY, echo: false });
  let { status, report } = longRun;
  if (upgrade.length) {
    const b = await built;
    report += `\n# the test builds (for ${upgrade.join(', ')}):\n${b.output.split('\n').slice(-6).join('\n')}\n`;
    if (b.status !== 0) {
      failures.push(`## the test builds failed (exit ${b.status}):\n${b.output.split('\n').slice(-20).join('\n')}`);
      status ||= b.status;
    } else {
      const upgradeRun = await testRun('upgrade tests', upgrade, { timeoutMs: TEST_TIMEOUT_MS, concurrency: 1, echo: false });
      report += upgradeRun.report;
      status ||= upgradeRun.status;
    }
  }
  const lastRun = await testRun('HA tests beside', lastBeside, { timeoutMs: TEST_TIMEOUT_MS, concurrency: 1, echo: false });
  return { status: status || lastRun.status, report: report + lastRun.report };
}
const beside = besideLane();
// Asynchronous, so the reports beside keep draining while this runs.
const main = await testRun('main run', rest, { timeoutMs: TEST_TIMEOUT_MS, concurrency: 1, echo: true });
const side = await beside;
process.stdout.write(side.report);
if (failures.length) process.stdout.write(`\n# what failed, in short (stack frames left out):\n${failures.join('\n')}\n`);
process.exit(main.status || side.status);
