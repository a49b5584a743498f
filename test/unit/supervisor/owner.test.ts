// The data dir owner record: who runs on a data dir, and stale records that must not count.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  claimDataDir,
  liveOwner,
  ownerFile,
  ownerRecord,
  releaseDataDir,
  runOwning,
} from '../../../src/supervisor/owner.ts';
import { tempDir } from '../../helpers.ts';
import { spawnProcess } from './util.ts';
import { alive, waitFor } from '../../wait.ts';

test('a claim records this pid and role (0644); a second claim names the holder; release removes it', async (t) => {
  const dir = join(await tempDir(t), 'data');
  assert.equal(await liveOwner(dir), undefined);
  assert.equal(await claimDataDir(dir, 'controller'), undefined);
  assert.equal((await stat(ownerFile(dir))).mode & 0o777, 0o644);
  assert.deepEqual(await liveOwner(dir), { pid: process.pid, role: 'controller' });
  assert.deepEqual(await claimDataDir(dir, 'worker'), { pid: process.pid, role: 'controller' });
  assert.deepEqual(
    await liveOwner(dir),
    { pid: process.pid, role: 'controller' },
    'a refused claim must not overwrite',
  );
  await releaseDataDir(dir);
  assert.equal(existsSync(ownerFile(dir)), false);
});

test('a live process that wrote the record owns the dir; once it exits the record is stale and can be replaced', async (t) => {
  const dir = await tempDir(t);
  const pid = await spawnProcess(t, '/bin/sleep', ['30']);
  await writeFile(ownerFile(dir), await ownerRecord(pid, 'worker'));
  assert.deepEqual(await liveOwner(dir), { pid, role: 'worker' });
  process.kill(pid, 'SIGKILL');
  await waitFor('the owner to exit', 5_000, async () => !(await alive(pid)));
  assert.equal(await liveOwner(dir), undefined);
  assert.equal(await claimDataDir(dir, 'controller'), undefined);
  assert.deepEqual(await liveOwner(dir), { pid: process.pid, role: 'controller' });
});

test('a reused pid (start time differs), another boot, or garbage do not count as running', async (t) => {
  const dir = await tempDir(t);
  const pid = await spawnProcess(t, '/bin/sleep', ['30']);
  const record = JSON.parse(await ownerRecord(pid, 'controller')) as Record<string, unknown>;
  await writeFile(ownerFile(dir), JSON.stringify({ ...record, startTime: '1' }));
  assert.equal(await liveOwner(dir), undefined, 'pid reused by another process');
  await writeFile(ownerFile(dir), JSON.stringify({ ...record, bootId: 'another-boot' }));
  assert.equal(await liveOwner(dir), undefined, 'record from before a reboot');
  for (const garbage of ['', '{', '12345\n', JSON.stringify({ ...record, role: 'tenant' })]) {
    await writeFile(ownerFile(dir), garbage);
    assert.equal(await liveOwner(dir), undefined, `garbage ${JSON.stringify(garbage)}`);
  }
  await writeFile(ownerFile(dir), JSON.stringify(record));
  assert.deepEqual(await liveOwner(dir), { pid, role: 'controller' });
});

test('release leaves a record that another process wrote', async (t) => {
  const dir = await tempDir(t);
  const pid = await spawnProcess(t, '/bin/sleep', ['30']);
  await writeFile(ownerFile(dir), await ownerRecord(pid, 'worker'));
  await releaseDataDir(dir);
  assert.match(await readFile(ownerFile(dir), 'utf8'), new RegExp(`"pid":${pid}`));
});

test('runOwning refuses while another live kctl holds the data dir or the run dir, and releases after the run', async (t) => {
  const dir = await tempDir(t);
  const runDir = await tempDir(t);
  const otherData = await tempDir(t);
  const busy = (d: string) =>
    `a kctl worker (pid ${process.pid}) is already running on ${d}; stop it first (kill -TERM ${process.pid}) or give this one its own --data-dir and --run-dir`;
  let ran = 0;
  await runOwning([dir, runDir], 'worker', async () => {
    ran += 1;
    assert.deepEqual(await liveOwner(dir), { pid: process.pid, role: 'worker' });
    assert.deepEqual(await liveOwner(runDir), { pid: process.pid, role: 'worker' });
    await assert.rejects(
      runOwning([dir, join(dir, 'elsewhere')], 'controller', async () => {
        ran += 10;
      }),
      { message: busy(dir) },
    );
    await assert.rejects(
      runOwning([otherData, runDir], 'controller', async () => {
        ran += 100;
      }),
      { message: busy(runDir) },
    );
    assert.equal(await liveOwner(otherData), undefined, 'a refused start left its claim on the data dir');
  });
  assert.equal(ran, 1);
  assert.equal(await liveOwner(dir), undefined);
  assert.equal(await liveOwner(runDir), undefined);
  await assert.rejects(
    runOwning([dir, runDir], 'controller', () => Promise.reject(new Error('start failed'))),
    { message: 'start failed' },
  );
  assert.equal(await liveOwner(dir), undefined, 'released after a failed run too');
});
