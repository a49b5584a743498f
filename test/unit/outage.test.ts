// longestOutage (test/e2e/lab/probe.ts): how long no server served, from requests sent through
// several servers at once; the upgrade e2e bounds it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { longestOutage } from '../e2e/lab/probe.ts';

const r = (source: string, at: number, tookMs: number, ok: boolean) => ({ source, at, tookMs, ok, what: '' });

test('a slow success counts as serving; a server that fails leaves a gap only while no other serves', () => {
  // a fails from 10 to 30; b's one slow exec (12 s) spans the time a fails in.
  const results = [
    r('a', 0, 1000, true),
    r('a', 10_000, 5000, false),
    r('a', 20_000, 5000, false),
    r('a', 30_000, 1000, true),
    r('b', 0, 1000, true),
    r('b', 9_000, 12_000, true),
    r('b', 21_500, 1000, true),
    r('b', 31_000, 1000, true),
  ];
  assert.deepEqual(longestOutage(results), { longest: 0, from: undefined });
});

test('the gap runs from the end of the last success before it to the next success anywhere', () => {
  const results = [
    r('a', 0, 1000, true),
    r('a', 2000, 4000, false),
    r('a', 7000, 1000, true),
    r('b', 0, 500, true),
    r('b', 1000, 9000, false),
    r('b', 10_500, 500, true),
  ];
  // a served 0-1 s (its next request failed), b 0-0.5 s; then a again at 7 s.
  assert.deepEqual(longestOutage(results), { longest: 6000, from: 1000 });
});

test('failures to the end of the probing count up to the last request', () => {
  const results = [r('a', 0, 1000, true), r('a', 5000, 1000, false), r('a', 9000, 1000, false)];
  assert.deepEqual(longestOutage(results), { longest: 8000, from: 1000 });
  assert.deepEqual(longestOutage([]), { longest: 0 });
});
