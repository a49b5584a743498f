// Removing a tree never goes through a mount point; directories others must reach get their mode whatever the umask.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { UserError } from '../../../src/base/errors.ts';
import { mkdirShared, mountsUnder, removeTree } from '../../../src/base/fs.ts';
import { tempDir } from '../../helpers.ts';

test(
  'a tree with something mounted below it is refused in one line, nothing removed',
  { skip: process.getuid?.() !== 0 && 'needs root to mount' },
  async (t) => {
    const dir = await tempDir(t);
    const data = join(dir, 'data');
    const volume = join(data, 'kubelet', 'pods', 'p', 'volumes', 'host');
    await mkdir(volume, { recursive: true });
    await writeFile(join(data, 'worker.json'), '{}');
    // Stands for a pod's hostPath volume: a directory of the host, bind-mounted below the data dir.
    const host = join(dir, 'host-files');
    await mkdir(host);
    await writeFile(join(host, 'precious'), 'x');
    execFileSync('mount', ['--bind', host, volume]);
    t.after(() => {
      if (existsSync(join(volume, 'precious'))) execFileSync('umount', ['--lazy', volume]);
    });
    assert.deepEqual(await mountsUnder([data]), [volume]);
    // A path through a symbolic link finds it too (mountinfo holds real paths).
    const link = join(dir, 'link');
    execFileSync('ln', ['-s', data, link]);
    assert.deepEqual(await mountsUnder([link]), [volume]);
    await assert.rejects(removeTree(data), (err: Error) => {
      assert.ok(err instanceof UserError);
      assert.equal(
        err.message,
        `${volume} is still mounted: nothing under ${data} was removed; unmount it (umount -R ${volume}) and try again`,
      );
      return true;
    });
    assert.ok(existsSync(join(data, 'worker.json')));
    assert.ok(existsSync(join(host, 'precious')));
    execFileSync('umount', [volume]);
    assert.deepEqual(await removeTree(data), [join(data, 'kubelet'), join(data, 'worker.json'), data]);
    assert.ok(existsSync(join(host, 'precious')));
  },
);

test('mkdirShared gives the directories it makes their mode under a umask of 0077, and leaves existing ones alone', async (t) => {
  const dir = await tempDir(t);
  const own = process.umask(0o077);
  t.after(() => {
    process.umask(own);
  });
  await mkdir(join(dir, 'kept'), { mode: 0o700 });
  await mkdirShared(join(dir, 'kept', 'a', 'b'));
  assert.equal((await stat(join(dir, 'kept'))).mode & 0o777, 0o700);
  assert.equal((await stat(join(dir, 'kept', 'a'))).mode & 0o777, 0o755);
  assert.equal((await stat(join(dir, 'kept', 'a', 'b'))).mode & 0o777, 0o755);
  await mkdir(join(dir, 'private'));
  assert.equal((await stat(join(dir, 'private'))).mode & 0o777, 0o700, 'the umask applies to a plain mkdir');
});
