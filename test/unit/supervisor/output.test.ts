import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LineSplitter, parseChildLine } from '../../../src/supervisor/output.ts';

function split(chunks: (string | Buffer)[], max?: number): [string, boolean][] {
  const out: [string, boolean][] = [];
  const s = new LineSplitter((line, truncated) => out.push([line, truncated]), max);
  for (const c of chunks) s.push(c);
  s.end();
  return out;
}

test('lines are joined across chunk boundaries, CRLF and blank lines handled, the tail flushed', () => {
  assert.deepEqual(split(['al', 'pha\nbe', 'ta\r\n\n', '\ngam', 'ma']), [
    ['alpha', false],
    ['beta', false],
    ['gamma', false],
  ]);
});

test('a multi-byte character split between chunks is not mangled', () => {
  const bytes = Buffer.from('grüße\n');
  assert.deepEqual(split([bytes.subarray(0, 3), bytes.subarray(3)]), [['grüße', false]]);
});

test('long lines are truncated once and the rest of the line is dropped', () => {
  assert.deepEqual(split(['abcdefgh', 'ijkl', 'mn\nok\n'], 5), [
    ['abcde', true],
    ['ok', false],
  ]);
  assert.deepEqual(split(['abcdefghij\nok\n'], 5), [
    ['abcde', true],
    ['ok', false],
  ]);
  assert.deepEqual(split(['abcdefghij'], 5), [['abcde', true]]);
});

test('levels: klog, zap JSON, logrus, plain', () => {
  assert.equal(parseChildLine('E1122 10:00:00.000000       1 server.go:12] failed').level, 'error');
  assert.equal(parseChildLine('W1122 10:00:00.000000       1 server.go:12] hmm').level, 'warn');
  assert.equal(parseChildLine('I1122 10:00:00.000000       1 server.go:12] fine').level, 'info');
  assert.equal(parseChildLine('F1122 10:00:00.000000       1 server.go:12] dead').level, 'fatal');
  assert.deepEqual(parseChildLine('{"level":"error","ts":"x","caller":"a.go:1","msg":"bad","error":"disk"}'), {
    level: 'error',
    msg: 'bad',
    fields: { caller: 'a.go:1', error: 'disk' },
  });
  assert.deepEqual(parseChildLine('{"ts":1,"v":2,"msg":"chatter"}'), {
    level: 'debug',
    msg: 'chatter',
    fields: { v: 2 },
  });
  assert.equal(parseChildLine('time="2026-01-01T00:00:00Z" level=warning msg="slow"').level, 'warn');
  assert.deepEqual(parseChildLine('Error: something'), { level: 'info', msg: 'Error: something' });
  assert.deepEqual(parseChildLine('{not json'), { level: 'info', msg: '{not json' });
});
