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
const long = files.filter((f) => f.endsWith('.long.test.ts'));
const upgrade = files.filter((f) => needsTestBuilds(f) && !long.includes(f));
const rest = files.filter((f) => !f.endsWith('.long.test.ts') && !upgrade.includes(f));

let longDone: Promise<{ status: number; report: string }> = Promise.resolve({ status: 0, report: '' });
if (long.length) {
  process.stdout.write(`# running beside the others, report at the end: ${long.join(', ')}\n`);
  const child = spawn(process.execPath, testArgs(LONG_TEST_TIMEOUT_MS, long.length, long), {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, FORCE_COLOR: '0' },
  });
  longDone = collect(child).then(({ status, output }) => ({ status, report: output }));
}
// The upgrade tests need the test builds (an older kctl with the previous Kubernetes release, one
// that cannot start: assets/build-test-kctls.ts). On a fresh machine the older Kubernetes takes
// about 10 minutes to compile, so they are built beside the main run from its start, at the lowest
// CPU and I/O priority: at full priority, writing three 160 MB executables stalled the tests that
// start their clusters at the same time (two long tests saw logs and exec fail for 35 s at once).
// The upgrade tests run after the main run, one at a time like it: they start five hosts and
// restart every member of a cluster, which loads the machine more than the tests beside allow.
const built = upgrade.length
  ? new Promise<{ status: number; output: string }>((resolve) => {
      const child = spawn('nice', ['-n', '19', 'ionice', '-c', '3', 'npx', 'tsx', 'assets/build-test-kctls.ts'], {
        cwd: root,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (c: Buffer) => (output += c.toString()));
      child.stderr.on('data', (c: Buffer) => (output += c.toString()));
      child.on('close', (code) => resolve({ status: code ?? 1, output }));
    })
  : Promise.resolve({ status: 0, output: '' });
/** What each group's failures said, printed again at the very end, where a log's tail shows them. */
const failures: string[] = [];
const serially = async (name: string, group: string[]): Promise<number> => {
  const child = spawn(process.execPath, testArgs(TEST_TIMEOUT_MS, 1, group), { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
  const { status, output } = await collect(child, true);
  if (status !== 0) failures.push(failureSummary(name, output));
  return status;
};
// Asynchronous, so the long tests' report keeps draining while this runs.
let main = rest.length ? await serially('main run', rest) : 0;
if (upgrade.length) {
  const b = await built;
  process.stdout.write(`\n# the test builds (for ${upgrade.join(', ')}):\n${b.output.split('\n').slice(-6).join('\n')}\n`);
  if (b.status !== 0) failures.push(`# the test builds failed (exit ${b.status}):\n${b.output.split('\n').slice(-20).join('\n')}`);
  const ran = b.status === 0 ? await serially('upgrade tests', upgrade) : b.status;
  if (main === 0) main = ran;
}
const side = await longDone;
if (long.length) process.stdout.write(`\n# long tests (${long.join(', ')}):\n${side.report}`);
if (side.status !== 0) failures.push(failureSummary('long tests', side.report));
if (failures.length) process.stdout.write(`\n# what failed, in short (stack frames left out):\n${failures.join('\n')}\n`);
process.exit(main !== 0 ? main : side.status);
