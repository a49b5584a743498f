import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { copyFile, mkdir, readdir, readlink, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import type { Role } from '../../../src/payload/manifest.ts';
import { stageComponents } from '../../../src/payload/stage.ts';
import {
  CURRENT,
  OLDER_LAYOUT,
  PREVIOUS,
  currentStage,
  previousStage,
  pruneStages,
  stageId,
  turnCurrent,
  upgradeDone,
} from '../../../src/payload/versions.ts';
import { captureLogger, tempDir } from '../../helpers.ts';
import { fakePayload } from './fake-payload.ts';

const worker: Role[] = ['worker'];
const v1 = [
  { name: 'kubelet', body: 'kubelet-1', roles: worker },
  { name: 'bridge', body: 'bridge-same', roles: worker, path: 'cni/bridge' },
];
const v2 = [
  { name: 'kubelet', body: 'kubelet-2', roles: worker },
  { name: 'bridge', body: 'bridge-same', roles: worker, path: 'cni/bridge' },
];

/** A start of a kctl carrying `payload`: stage its own directory (linked from current), turn current, prune. */
async function start(t: TestContext, root: string, files: typeof v1, kctl: string) {
  const { log } = captureLogger();
  const payload = await fakePayload(await tempDir(t), files, kctl);
  const id = stageId(payload);
  const current = await currentStage(root);
  const result = await stageComponents(payload, join(root, id), worker, log, current ? join(root, current) : root);
  const previous = await turnCurrent(root, id);
  const removed = await pruneStages(root, log);
  return { id, result, previous, removed };
}

test('the stage name is the kctl version and a digest of the components: a new build of one version is another stage', async (t) => {
  const a = stageId(await fakePayload(await tempDir(t), v1, '1.0.0'));
  assert.match(a, /^1\.0\.0-[0-9a-f]{12}$/);
  assert.equal(stageId(await fakePayload(await tempDir(t), v1, '1.0.0')), a);
  assert.notEqual(stageId(await fakePayload(await tempDir(t), v2, '1.0.0')), a);
  assert.match(stageId(await fakePayload(await tempDir(t), v1, '1.0.0/odd name')), /^1\.0\.0_odd_name-[0-9a-f]{12}$/);
});

test('an upgrade stages only what changed, keeps the previous version until it is done, and a rollback stages nothing', async (t) => {
  const root = join(await tempDir(t), 'bin');
  const first = await start(t, root, v1, '1.0.0');
  assert.equal(first.previous, 'none');
  assert.equal(await readlink(join(root, CURRENT)), first.id);

  const second = await start(t, root, v2, '1.1.0');
  assert.equal(second.previous, first.id);
  assert.deepEqual(second.removed, []);
  assert.equal(await previousStage(root), first.id);
  // The unchanged CNI plugin is the same inode in both; the changed kubelet is a file of its own.
  const ino = async (id: string, path: string) => (await stat(join(root, id, path))).ino;
  assert.equal(await ino(second.id, 'cni/bridge'), await ino(first.id, 'cni/bridge'));
  assert.notEqual(await ino(second.id, 'kubelet'), await ino(first.id, 'kubelet'));
  // Through current, the new bytes.
  assert.equal(String(await readlink(join(root, CURRENT))), second.id);

  // A rollback: the previous kctl starts again and finds every file of its own staged.
  const back = await start(t, root, v1, '1.0.0');
  assert.equal(back.id, first.id);
  assert.deepEqual(back.result.staged, []);
  assert.deepEqual(back.result.replaced, []);
  assert.equal(back.previous, second.id);
  assert.deepEqual((await readdir(root)).sort(), [CURRENT, PREVIOUS, first.id, second.id].sort());

  // The upgrade done: the previous version goes, current stays; a second call has nothing to do.
  const { log } = captureLogger();
  assert.deepEqual(await upgradeDone(root, log), [second.id]);
  assert.deepEqual((await readdir(root)).sort(), [CURRENT, first.id].sort());
  assert.deepEqual(await upgradeDone(root, log), []);
});

test('a restart keeps the previous version; a third version drops the one before the previous', async (t) => {
  const root = join(await tempDir(t), 'bin');
  const a = await start(t, root, v1, '1.0.0');
  const b = await start(t, root, v2, '1.1.0');
  const again = await start(t, root, v2, '1.1.0');
  assert.equal(again.previous, undefined, 'a restart at the same version turns nothing');
  assert.equal(
    await previousStage(root),
    a.id,
    'the previous version stays across a restart before the upgrade is done',
  );
  const c = await start(t, root, [{ name: 'kubelet', body: 'kubelet-3', roles: worker }], '1.2.0');
  assert.equal(c.previous, b.id);
  assert.deepEqual(c.removed, [a.id]);
});

test('the older layout (binaries directly in the bin root) is the previous version until the upgrade is done', async (t) => {
  const root = join(await tempDir(t), 'bin');
  const { log } = captureLogger();
  const old = await fakePayload(await tempDir(t), v1, '0.9.0');
  await stageComponents(old, root, worker, log);
  const before = (await stat(join(root, 'cni/bridge'))).ino;
  const up = await start(t, root, v2, '1.0.0');
  assert.equal(up.previous, OLDER_LAYOUT);
  assert.equal(await previousStage(root), OLDER_LAYOUT);
  assert.equal(
    (await stat(join(root, up.id, 'cni/bridge'))).ino,
    before,
    'linked from the older layout, not decompressed',
  );
  assert.ok((await readdir(root)).includes('kubelet'), 'the older layout stays until the upgrade is done');
  assert.deepEqual(await upgradeDone(root, log), [OLDER_LAYOUT]);
  assert.deepEqual((await readdir(root)).sort(), [CURRENT, up.id].sort());
});

test('a version whose binary still runs (the shim of a container that outlived the upgrade) goes all the same; the process runs on', async (t) => {
  const root = join(await tempDir(t), 'bin');
  const a = await start(t, root, v1, '1.0.0');
  await copyFile('/bin/sleep', join(root, a.id, 'sleeper'));
  const sleeper = spawn(join(root, a.id, 'sleeper'), ['30'], { stdio: 'ignore' });
  t.after(() => sleeper.kill('SIGKILL'));
  await new Promise((r) => sleeper.once('spawn', r));
  await start(t, root, v2, '1.1.0');
  const { log } = captureLogger();
  assert.deepEqual(await upgradeDone(root, log), [a.id]);
  assert.ok(!(await readdir(root)).includes(a.id));
  assert.equal(sleeper.exitCode, null, 'the process from the removed version still runs');
});

test('only an older layout, with nothing staged by this kctl yet: nothing is pruned', async (t) => {
  const root = join(await tempDir(t), 'bin');
  await mkdir(root);
  await writeFile(join(root, 'kubelet'), 'x');
  const { log } = captureLogger();
  assert.deepEqual(await pruneStages(root, log), []);
  assert.equal(await currentStage(root), undefined);
});
