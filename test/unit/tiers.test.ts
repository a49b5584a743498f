// The CI rule for the files beyond `npm test` (test/tiers.ts, test/README.md "Tiers").
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  CORE_E2E,
  expectedMs,
  readHistory,
  recordRun,
  LAST_BESIDE,
  pickForBudget,
  runsBeside,
  SLOW_UNIT_FILES,
  slowFirst,
  testFiles,
  type History,
} from '../tiers.ts';

const MIN = 60_000;
const ran = (at: string, minutes: number, passed = true) => ({ at, durationMs: minutes * MIN, passed });

test('files this machine ran least recently come first; never-run ones before all, by name', () => {
  const history: History = {
    'test/e2e/a.test.ts': ran('2026-11-29T08:00:00Z', 2),
    'test/e2e/b.test.ts': ran('2026-11-28T08:00:00Z', 2),
  };
  const picked = pickForBudget(
    ['test/e2e/a.test.ts', 'test/e2e/b.test.ts', 'test/e2e/d.test.ts', 'test/e2e/c.test.ts'],
    history,
    100 * MIN,
  );
  assert.deepEqual(picked, ['test/e2e/c.test.ts', 'test/e2e/d.test.ts', 'test/e2e/b.test.ts', 'test/e2e/a.test.ts']);
});

test('a file that does not fit is passed over and a shorter one behind it still runs; unknown files count 10 min, long ones 25', () => {
  const history: History = {
    'test/e2e/big.test.ts': ran('2026-11-27T00:00:00Z', 12),
    'test/e2e/small.test.ts': ran('2026-11-28T00:00:00Z', 3),
    'test/e2e/late.test.ts': ran('2026-11-29T00:00:00Z', 4),
  };
  const files = ['test/e2e/big.test.ts', 'test/e2e/small.test.ts', 'test/e2e/late.test.ts'];
  assert.deepEqual(pickForBudget(files, history, 8 * MIN), ['test/e2e/small.test.ts', 'test/e2e/late.test.ts']);
  assert.deepEqual(pickForBudget(files, history, 2 * MIN), []);
  assert.deepEqual(pickForBudget(['test/e2e/new.test.ts'], {}, 9 * MIN), []);
  assert.deepEqual(pickForBudget(['test/e2e/new.test.ts'], {}, 10 * MIN), ['test/e2e/new.test.ts']);
  assert.deepEqual(pickForBudget(['test/e2e/x.long.test.ts'], {}, 24 * MIN), []);
});

test('the tier lists name files that exist; the slow unit files start first', () => {
  const e2e = testFiles('test/e2e');
  for (const f of [...CORE_E2E, ...LAST_BESIDE])
    assert.ok(e2e.includes(f), `${f} is listed in tiers.ts but does not exist`);
  assert.ok(
    CORE_E2E.every((f) => !runsBeside(f)),
    'core files run in the main lane',
  );
  const units = testFiles('test/unit');
  for (const f of SLOW_UNIT_FILES) assert.ok(units.includes(f), `${f} is listed in tiers.ts but does not exist`);
  const ordered = slowFirst(units);
  assert.equal(ordered.length, units.length);
  assert.equal(ordered[0], 'test/unit/supervisor/handover.test.ts');
});

test('a file is expected to take the slowest of its last three runs', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kctl-tiers-'));
  const before = process.env.KCTL_CACHE_DIR;
  process.env.KCTL_CACHE_DIR = dir;
  try {
    const f = 'test/e2e/upgrade/cluster.test.ts';
    for (const minutes of [17, 9, 10, 11]) recordRun(f, ran('2026-11-30T00:00:00Z', minutes));
    const history = readHistory();
    assert.deepEqual(
      history[f]?.recentMs,
      [9, 10, 11].map((m) => m * MIN),
    );
    assert.equal(expectedMs(f, history), 11 * MIN, 'the 17-minute run is no longer among the last three');
    recordRun(f, ran('2026-11-30T01:00:00Z', 4));
    assert.equal(expectedMs(f, readHistory()), 11 * MIN);
    assert.equal(expectedMs(f, { [f]: ran('2026-11-30T00:00:00Z', 6) }), 6 * MIN, 'a run recorded before recentMs');
  } finally {
    if (before === undefined) delete process.env.KCTL_CACHE_DIR;
    else process.env.KCTL_CACHE_DIR = before;
    rmSync(dir, { recursive: true, force: true });
  }
});
