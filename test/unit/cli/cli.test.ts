import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { componentLogger } from '../../../src/base/log.ts';
import { captureLogger } from '../../helpers.ts';

const root = new URL('../../..', import.meta.url).pathname;
const kctl = (...args: string[]) =>
  spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/index.ts', ...args], { cwd: root, encoding: 'utf8' });

test('an unknown command prints one error line plus usage and exits non-zero', () => {
  const r = kctl('frobnicate');
  assert.notEqual(r.status, 0);
  const lines = r.stderr.trim().split('\n');
  assert.equal(lines[0], "kctl: unknown command 'frobnicate'");
  assert.match(lines[1] ?? '', /^usage: kctl /);
  assert.equal(lines.length, 2);
});

test('a bad member name is refused in one line, from the flag or from its environment variable', () => {
  for (const r of [
    kctl('controller', '--member-name', 'Pod_1', '--init-only'),
    spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/index.ts', 'controller', '--init-only'], {
      cwd: root,
      encoding: 'utf8',
      env: { ...process.env, KCTL_MEMBER_NAME: '-x' },
    }),
  ]) {
    assert.notEqual(r.status, 0);
    const lines = r.stderr.trim().split('\n');
    assert.match(lines[0] ?? '', /^kctl: --member-name "(Pod_1|-x)": expected lower-case letters, digits/);
    assert.equal(lines.length, 1);
  }
});

test('an unknown flag is refused the same way', () => {
  const r = kctl('version', '--frob');
  assert.notEqual(r.status, 0);
  assert.equal(r.stderr.trim().split('\n')[0], "kctl: unknown option '--frob'");
});

test('a bad -o value names the allowed choices', () => {
  const r = kctl('version', '-o', 'yaml');
  assert.notEqual(r.status, 0);
  assert.match(
    r.stderr,
    /kctl: option '-o, --output <format>' argument 'yaml' is invalid. Allowed choices are text, json/,
  );
});

test('--help lists the commands and global flags', () => {
  const r = kctl('--help');
  assert.equal(r.status, 0);
  for (const s of ['version', 'controller', '--data-dir', '--debug'])
    assert.ok(r.stdout.includes(s), `help lacks ${s}`);
});

test('every log line is JSON with a component field', () => {
  const { log, lines, raw } = captureLogger();
  const rawLines = () => raw().split('\n').filter(Boolean);
  log.info('root line');
  componentLogger(log, 'stage').info('child line');
  componentLogger(componentLogger(log, 'stage'), 'etcd').info('grandchild line');
  assert.deepEqual(
    lines().map((l) => [l.component, l.msg]),
    [
      ['kctl', 'root line'],
      ['stage', 'child line'],
      ['etcd', 'grandchild line'],
    ],
  );
  // One component field per line, not one per ancestor.
  assert.deepEqual(
    rawLines().map((l) => l.split('"component"').length - 1),
    [1, 1, 1],
  );
});
