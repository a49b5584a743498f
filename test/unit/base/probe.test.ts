// pollUntil: how often a start checks whether a component is ready yet.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { pollPauses, pollUntil } from '../../../src/base/probe.ts';

test('poll pauses start at 50 ms and grow by half up to the interval, never past it', () => {
  const take = (intervalMs: number, n: number) => {
    const it = pollPauses(intervalMs);
    return Array.from({ length: n }, () => it.next().value);
  };
  assert.deepEqual(take(500, 9), [50, 75, 113, 170, 255, 383, 500, 500, 500]);
  assert.deepEqual(take(100, 4), [50, 75, 100, 100]);
  assert.deepEqual(take(20, 3), [20, 20, 20], 'an interval below the first pause is kept');
});

test('pollUntil resolves at the first passing check, and rejects with the last reason once aborted', async () => {
  let checks = 0;
  await pollUntil(AbortSignal.timeout(10_000), 'thing', async () => {
    if (++checks < 3) throw new Error(`not yet (${checks})`);
  });
  assert.equal(checks, 3);
  await assert.rejects(
    pollUntil(AbortSignal.timeout(300), 'thing', async () => {
      throw new Error('port closed');
    }),
    /^Error: thing did not become ready: port closed$/,
  );
});
