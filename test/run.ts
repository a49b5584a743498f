// The whole suite: unit tests (fakes, fast), then end-to-end tests against dist/kctl and the
// real component binaries. `npm test` builds what it needs first (see package.json pretest).
//
// Files named *.long.test.ts spend most of their time waiting on the clock (certificate
// renewals, scheduled backups) or on the restarts of a long scenario (a CA rotation, an upgrade): they run
// side by side with the rest, all at once, in a second
// test process whose report is printed when the main run is done. Such a file uses its own lab
// (its own names, nothing in the root namespace) and never touches processes it did not start.
import { spawn } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

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

const only = process.argv.slice(2);
const suites = only.length ? only : ['test/unit', 'test/e2e', 'bench'];
const files = suites.flatMap((s) => (s.endsWith('.ts') ? [s] : testFiles(join(root, s))));
const long = files.filter((f) => f.endsWith('.long.test.ts'));
const rest = files.filter((f) => !f.endsWith('.long.test.ts'));

/** A test process beside the main one (after `before`, if given); its report is kept for the end. */
function besideMain(group: string[], before?: string[]): Promise<{ status: number; report: string }> {
  const chunks: Buffer[] = [];
  const run = (command: string, args: string[]) =>
    new Promise<number>((resolve) => {
      const child = spawn(command, args, { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, FORCE_COLOR: '0' } });
      child.stdout.on('data', (c: Buffer) => chunks.push(c));
      child.stderr.on('data', (c: Buffer) => chunks.push(c));
      child.on('close', (code) => resolve(code ?? 1));
    });
  const done = (async () => {
    const built = before ? await run(before[0]!, before.slice(1)) : 0;
    return built !== 0 ? built : run(process.execPath, testArgs(LONG_TEST_TIMEOUT_MS, group.length, group));
  })();
  return done.then((status) => ({ status, report: Buffer.concat(chunks).toString() }));
}

// The upgrade tests need the test builds (an older kctl with the previous Kubernetes release, one
// that cannot start: assets/build-test-kctls.ts). On a fresh machine the older Kubernetes takes
// about 10 minutes to compile, so it is built here beside the main run, not before it.
const needsTestBuilds = (f: string): boolean => f.startsWith('test/e2e/upgrade/');
const groups = [
  { files: long.filter((f) => !needsTestBuilds(f)) },
  { files: long.filter(needsTestBuilds), before: ['npx', 'tsx', 'assets/build-test-kctls.ts'] },
].filter((g) => g.files.length);
if (long.length) process.stdout.write(`# running beside the others, report at the end: ${long.join(', ')}\n`);
const longDone = Promise.all(groups.map((g) => besideMain(g.files, g.before))).then((rs) => ({
  status: rs.find((r) => r.status !== 0)?.status ?? 0,
  report: rs.map((r) => r.report).join('\n'),
}));
// Asynchronous, so the long tests' report keeps draining while this runs.
const main = rest.length
  ? await new Promise<number>((resolve) =>
      spawn(process.execPath, testArgs(TEST_TIMEOUT_MS, 1, rest), { cwd: root, stdio: 'inherit' }).on('close', (code) => resolve(code ?? 1)),
    )
  : 0;
const side = await longDone;
if (long.length) process.stdout.write(`\n# long tests (${long.join(', ')}):\n${side.report}`);
process.exit(main !== 0 ? main : side.status);
