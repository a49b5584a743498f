// `kctl reset` removes a run dir only if kctl made it: a mistaken --run-dir loses nothing.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, readdir, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { isKctlRunDir, prepareRunDir, removeRunDir, RUN_DIR_MARKER } from '../../../src/supervisor/run-dir.ts';
import { captureLogger, tempDir } from '../../helpers.ts';

test('a run dir kctl makes is private and marked, and reset removes it with all it holds', async (t) => {
  const run = join(await tempDir(t), 'run', 'kctl');
  await prepareRunDir(run);
  assert.equal((await stat(run)).mode & 0o777, 0o700);
  assert.equal(await isKctlRunDir(run), true);
  await writeFile(join(run, 'kubelet.pid'), '1\n');
  await prepareRunDir(run); // a later start keeps the marker
  assert.deepEqual((await readdir(run)).sort(), [RUN_DIR_MARKER, 'kubelet.pid']);
  const { log, lines } = captureLogger();
  await removeRunDir(run, log);
  assert.equal(existsSync(run), false);
  assert.deepEqual(
    lines().map((l) => l.msg),
    [`removed ${join(run, RUN_DIR_MARKER)}`, `removed ${join(run, 'kubelet.pid')}`, `removed ${run}`],
  );
});

test('a directory that was there before (--run-dir /home/x) is used but never marked, and reset leaves it whole', async (t) => {
  const home = join(await tempDir(t), 'home-x');
  await mkdir(join(home, 'photos'), { recursive: true });
  await writeFile(join(home, 'photos', 'cat.jpg'), 'x');
  await prepareRunDir(home);
  assert.equal(await isKctlRunDir(home), false);
  await writeFile(join(home, 'status.sock'), ''); // what a worker leaves there
  const { log, lines } = captureLogger();
  await removeRunDir(home, log);
  assert.deepEqual((await readdir(home)).sort(), ['photos', 'status.sock']);
  assert.equal(lines().length, 1);
  assert.equal(lines()[0]!.level, 40);
  assert.equal(
    lines()[0]!.msg,
    `left ${home} as it is: it has no ${RUN_DIR_MARKER}, so kctl did not make it (remove kctl's pid files and sockets there by hand)`,
  );
});

test('--run-dir /: never marked, never removed', async () => {
  await prepareRunDir('/');
  assert.equal(existsSync(join('/', RUN_DIR_MARKER)), false);
  const { log, lines } = captureLogger();
  await removeRunDir('/', log);
  assert.match(String(lines()[0]!.msg), /^left \/ as it is/);
  assert.ok(existsSync('/etc'));
});

test('a marker that is not a regular file does not count', async (t) => {
  const run = join(await tempDir(t), 'run');
  await mkdir(join(run, RUN_DIR_MARKER), { recursive: true });
  assert.equal(await isKctlRunDir(run), false);
});
