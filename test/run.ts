// The whole suite: unit tests (fakes, fast), then end-to-end tests against dist/kctl and the
// real component binaries. `npm test` builds what it needs first (see package.json pretest).
import { spawnSync } from 'node:child_process';
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

const only = process.argv.slice(2);
const suites = only.length ? only : ['test/unit', 'test/e2e', 'bench'];
const files = suites.flatMap((s) => (s.endsWith('.ts') ? [s] : testFiles(join(root, s))));
const r = spawnSync(
  process.execPath,
  ['--import', 'tsx', '--test', '--test-concurrency=1', `--test-timeout=${TEST_TIMEOUT_MS}`, '--test-force-exit', '--test-reporter=spec', ...files],
  {
    cwd: root,
    stdio: 'inherit',
  },
);
process.exit(r.status ?? 1);
