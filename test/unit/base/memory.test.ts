import assert from 'node:assert/strict';
import { test } from 'node:test';
import { releaseFreedMemory, trimFreedMemory } from '../../../src/base/memory.ts';
import { captureLogger } from '../../helpers.ts';

// The addon ships inside dist/kctl only (the e2e controller test checks the trim there).
test('from a checkout there is no addon: nothing is trimmed, nothing is logged, nothing keeps running', () => {
  const { log, lines } = captureLogger();
  assert.equal(releaseFreedMemory(log), undefined);
  const stop = trimFreedMemory(log);
  stop();
  assert.deepEqual(lines(), []);
});
