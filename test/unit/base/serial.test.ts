// SerialRunner: one reconcile at a time, and a burst of requests meanwhile folded into one more run.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { SerialRunner } from '../../../src/base/serial.ts';

test('requests while a run is under way fold into one run after it; idle waits for both', async () => {
  let runs = 0;
  let atOnce = 0;
  let most = 0;
  const runner = new SerialRunner(async () => {
    runs++;
    most = Math.max(most, ++atOnce);
    await sleep(20);
    atOnce--;
  });
  runner.schedule();
  for (let i = 0; i < 5; i++) runner.schedule();
  await runner.idle();
  assert.equal(runs, 2);
  assert.equal(most, 1, 'never two runs at once');
  runner.schedule();
  await runner.idle();
  assert.equal(runs, 3);
});
