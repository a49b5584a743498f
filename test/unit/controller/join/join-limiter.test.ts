import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FailureLimiter, JOIN_LIMITS } from '../../../../src/controller/join/join-limiter.ts';

const clock = () => {
  const c = { t: 1_000_000, now: () => c.t };
  return c;
};

test('the join endpoint blocks a source after 10 failures within a minute, for a minute', () => {
  assert.deepEqual([JOIN_LIMITS.failures, JOIN_LIMITS.windowMs, JOIN_LIMITS.blockMs], [10, 60_000, 60_000]);
  const c = clock();
  const l = new FailureLimiter({ now: c.now });
  for (let i = 1; i < 10; i++) {
    assert.equal(l.fail('10.0.0.9'), false, `failure ${i} started a block`);
    c.t += 5_000;
  }
  assert.equal(l.blockedFor('10.0.0.9'), 0);
  assert.equal(l.fail('10.0.0.9'), true, 'the tenth failure starts the block');
  assert.equal(l.blockedFor('10.0.0.9'), 60_000);
  assert.equal(l.blockedFor('10.0.0.8'), 0, 'another source is not affected');
  // Failures while blocked do not start (or log) the block again.
  assert.equal(l.fail('10.0.0.9'), false);
  c.t += 59_999;
  assert.equal(l.blockedFor('10.0.0.9'), 1);
  c.t += 1;
  assert.equal(l.blockedFor('10.0.0.9'), 0, 'the block ends after a minute');
  // After the block the count starts again from zero.
  for (let i = 1; i < 10; i++) assert.equal(l.fail('10.0.0.9'), false);
  assert.equal(l.fail('10.0.0.9'), true);
});

test('failures older than the window do not count', () => {
  const c = clock();
  const l = new FailureLimiter({ now: c.now });
  for (let i = 0; i < 20; i++) {
    assert.equal(l.fail('10.0.0.9'), false, `failure ${i}`);
    c.t += 6_700; // 9 failures per 60 s
  }
  assert.equal(l.blockedFor('10.0.0.9'), 0);
});

test('the sources it remembers stay bounded under failures from many addresses', () => {
  const c = clock();
  const l = new FailureLimiter({ now: c.now, maxSources: 100 });
  for (let i = 0; i < 1000; i++) {
    l.fail(`10.1.${i >> 8}.${i & 255}`);
    c.t += 10;
  }
  assert.ok(l.size <= 100, `${l.size} sources tracked`);
});
