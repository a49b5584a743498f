import assert from 'node:assert/strict';
import { test } from 'node:test';
import { failureSummary } from '../failures.ts';

test('the failure summary keeps the failing-tests section without stack frames', () => {
  const section = [
    '✖ failing tests:',
    '',
    'test at bench/smoke.test.ts:1:2',
    '✖ fails (20ms)',
    '  AssertionError [ERR_ASSERTION]: bench failed:',
    '  cannot start',
  ];
  const stack = [
    '      at TestContext.<anonymous> (/x/bench/smoke.test.ts:3:4)',
    '      at async Test.run (node:internal/test_runner/test:1409:7)',
  ];
  const output = ['✔ passes (10ms)', '✖ fails (20ms)', 'ℹ fail 1', '', ...section, ...stack].join('\n');
  assert.equal(failureSummary('main run', output), ['## main run:', ...section].join('\n'));
});

test('a run with no failing-tests section is summarised by its last lines, and a long one is cut', () => {
  const lines = Array.from({ length: 30 }, (_, i) => `line ${i}`);
  const summary = failureSummary('upgrade tests', lines.join('\n')).split('\n');
  assert.equal(summary[0], '## upgrade tests (no failing-tests section; its last lines):');
  assert.deepEqual(summary.slice(1), lines.slice(-20));
  const many = ['✖ failing tests:', ...Array.from({ length: 100 }, (_, i) => `e${i} ${'x'.repeat(500)}`)].join('\n');
  const cut = failureSummary('long tests', many).split('\n');
  assert.equal(cut.length, 1 + 60 + 1);
  assert.equal(cut.at(-1), '… 41 more lines left out');
  assert.ok(cut[2]!.endsWith(' …') && cut[2]!.length < 420);
});
