// The whole suite: unit tests (fakes, fast), then end-to-end tests against dist/kctl and the
// real component binaries. `npm test` builds what it needs first (see package.json pretest).
//
// Files named *.long.test.ts spend most of their time waiting on the clock (certificate
// renewals, scheduled backups) or on the restarts of a long scenario (a CA rotation): they run
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
  const chunks: Buffer[] = [];
  child.stdout.on('data', (c: Buffer) => chunks.push(c));
  child.stderr.on('data', (c: Buffer) => chunks.push(c));
  longDone = new Promise((resolve) => child.on('close', (code) => resolve({ status: code ?? 1, report: Buffer.concat(chunks).toString() })));
}
// The upgrade tests need the test builds (an older kctl with the previous Kubernetes release, one
// that cannot start: assets/build-test-kctls.ts). On a fresh machine the older Kubernetes takes
// about 10 minutes to compile, so they are built beside the main run from its start. The upgrade
// tests start five hosts and restart every member of a cluster: beside the long tests they load the
// machine more than those tests allow, so they wait for the long tests to end, then run beside the
// rest of the main run, one at a time (or after it, if it ends first).
const built = upgrade.length
  ? new Promise<{ status: number; output: string }>((resolve) => {
      const child = spawn('npx', ['tsx', 'assets/build-test-kctls.ts'], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
      let output = '';
      child.stdout.on('data', (c: Buffer) => (output += c.toString()));
      child.stderr.on('data', (c: Buffer) => (output += c.toString()));
      child.on('close', (code) => resolve({ status: code ?? 1, output }));
    })
  : Promise.resolve({ status: 0, output: '' });
const run = (group: string[], stdio: 'inherit' | 'pipe') =>
  new Promise<{ status: number; report: string }>((resolve) => {
    const child = spawn(process.execPath, testArgs(TEST_TIMEOUT_MS, 1, group), { cwd: root, stdio: ['ignore', stdio, stdio] });
    const chunks: Buffer[] = [];
    child.stdout?.on('data', (c: Buffer) => chunks.push(c));
    child.stderr?.on('data', (c: Buffer) => chunks.push(c));
    child.on('close', (code) => resolve({ status: code ?? 1, report: Buffer.concat(chunks).toString() }));
  });
const upgradeDone: Promise<{ status: number; report: string }> = upgrade.length
  ? Promise.all([built, longDone]).then(async ([b]) => {
      const head = `# the test builds (for ${upgrade.join(', ')}):\n${b.output.split('\n').slice(-6).join('\n')}\n`;
      if (b.status !== 0) return { status: b.status, report: head };
      const r = await run(upgrade, 'pipe');
      return { status: r.status, report: `${head}${r.report}` };
    })
  : Promise.resolve({ status: 0, report: '' });
// Asynchronous, so the long tests' and the upgrade tests' reports keep draining while this runs.
const main = rest.length ? (await run(rest, 'inherit')).status : 0;
const side = await longDone;
if (long.length) process.stdout.write(`\n# long tests (${long.join(', ')}):\n${side.report}`);
const upgraded = await upgradeDone;
if (upgrade.length) process.stdout.write(`\n# upgrade tests (${upgrade.join(', ')}), beside the end of the main run:\n${upgraded.report}`);
process.exit([main, side.status, upgraded.status].find((s) => s !== 0) ?? 0);
