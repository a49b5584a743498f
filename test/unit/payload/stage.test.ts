import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { chmod, readdir, readFile, rename, stat, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import type { Role } from '../../../src/payload/manifest.ts';
import { DirectoryPayload } from '../../../src/payload/payload.ts';
import { PayloadChecksumError, stageComponents, stageImages } from '../../../src/payload/stage.ts';
import { saveBundledImages } from '../../../src/payload/save-images.ts';
import { BUSYBOX_IMAGE, PAUSE_IMAGE, PROXY_AGENT_IMAGE } from '../../../src/payload/images.ts';
import { captureLogger, tempDir } from '../../helpers.ts';
import { fakePayload } from './fake-payload.ts';

const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

const files = [
  { name: 'etcd', body: 'etcd-binary-'.repeat(5000), roles: ['controller'] as Role[] },
  { name: 'kubelet', body: 'kubelet-binary', roles: ['worker'] as Role[] },
  { name: 'bridge', body: 'cni-bridge', roles: ['worker'] as Role[], path: 'cni/bridge' },
];

test('stages only the requested role, executable, with a manifest', async (t) => {
  const src = await tempDir(t);
  const bin = join(await tempDir(t), 'bin');
  const payload = await fakePayload(src, files);
  const { log } = captureLogger();
  const r = await stageComponents(payload, bin, ['worker'], log);
  assert.deepEqual(r.staged.sort(), ['bridge', 'kubelet']);
  assert.equal(await readFile(join(bin, 'cni/bridge'), 'utf8'), 'cni-bridge');
  assert.equal((await stat(join(bin, 'kubelet'))).mode & 0o777, 0o755);
  await assert.rejects(stat(join(bin, 'etcd')), { code: 'ENOENT' });
  const manifest = JSON.parse(await readFile(join(bin, 'manifest.json'), 'utf8')) as {
    components: { name: string; sha256: string }[];
  };
  assert.deepEqual(manifest.components.map((c) => c.name).sort(), ['bridge', 'kubelet']);
});

test('a second staging leaves unchanged files alone', async (t) => {
  const src = await tempDir(t);
  const bin = join(await tempDir(t), 'bin');
  const payload = await fakePayload(src, files);
  const { log } = captureLogger();
  await stageComponents(payload, bin, ['controller'], log);
  const before = await stat(join(bin, 'etcd'));
  const r = await stageComponents(payload, bin, ['controller'], log);
  assert.deepEqual(r.unchanged, ['etcd']);
  assert.deepEqual(r.staged, []);
  assert.equal((await stat(join(bin, 'etcd'))).ino, before.ino, 'file was rewritten');
});

test('a tampered staged file is detected, replaced, and logged', async (t) => {
  const src = await tempDir(t);
  const bin = join(await tempDir(t), 'bin');
  const payload = await fakePayload(src, files);
  const cap = captureLogger();
  await stageComponents(payload, bin, ['controller'], cap.log);
  await writeFile(join(bin, 'etcd'), '#!/bin/sh\necho evil\n');
  await chmod(join(bin, 'etcd'), 0o755);
  const r = await stageComponents(payload, bin, ['controller'], cap.log);
  assert.deepEqual(r.replaced, ['etcd']);
  assert.equal(sha(await readFile(join(bin, 'etcd'))), sha(files[0]!.body));
  const warn = cap.lines().find((l) => l.msg === 'replaced a corrupted or foreign component binary');
  assert.ok(warn, 'no log line about the replacement');
  assert.equal(warn.component, 'kctl');
});

test('a same-size rewrite with the old mtime put back is still caught (the stamp holds the ctime)', async (t) => {
  const src = await tempDir(t);
  const bin = join(await tempDir(t), 'bin');
  const payload = await fakePayload(src, files);
  const cap = captureLogger();
  await stageComponents(payload, bin, ['controller'], cap.log);
  const target = join(bin, 'etcd');
  const before = await stat(target);
  const body = Buffer.from(await readFile(target));
  body[0] = body[0]! ^ 1;
  await writeFile(target, body);
  await utimes(target, before.atime, before.mtime);
  const r = await stageComponents(payload, bin, ['controller'], cap.log);
  assert.deepEqual(r.replaced, ['etcd']);
  assert.equal(sha(await readFile(target)), sha(files[0]!.body));
});

test('concurrent stagings into one dir leave correct files and no temp files', async (t) => {
  const src = await tempDir(t);
  const bin = join(await tempDir(t), 'bin');
  const payload = await fakePayload(src, files);
  const { log } = captureLogger();
  const results = await Promise.all(
    [1, 2, 3, 4].map(() => stageComponents(payload, bin, ['controller', 'worker'], log)),
  );
  const stagedCount = results.reduce((n, r) => n + r.staged.length, 0);
  assert.equal(stagedCount, 3, 'each file is copied exactly once under the lock');
  for (const f of files) assert.equal(sha(await readFile(join(bin, f.path ?? f.name))), sha(f.body));
  const leftovers = (await readdir(bin)).filter((n) => n.endsWith('.tmp') || n === '.stage.lock');
  assert.deepEqual(leftovers, []);
});

test('a payload whose checksum does not match refuses to stage, writes nothing', async (t) => {
  const src = await tempDir(t);
  const bin = join(await tempDir(t), 'bin');
  const payload = await fakePayload(src, files);
  await writeFile(join(src, 'kubelet'), 'kubelet-binarX'); // same size, different bytes
  const { log } = captureLogger();
  await assert.rejects(stageComponents(payload, bin, ['worker'], log), (err: Error) => {
    assert.ok(err instanceof PayloadChecksumError);
    assert.match(err.message, /payload component kubelet is corrupt .*reinstall or rebuild kctl/);
    assert.equal(err.message.includes('\n'), false);
    return true;
  });
  await assert.rejects(stat(join(bin, 'kubelet')), { code: 'ENOENT' });
  assert.deepEqual(
    (await readdir(bin)).filter((n) => n.endsWith('.tmp')),
    [],
  );
});

test('workers stage the carried images; save-images writes those asked for, and refuses an unknown name', async (t) => {
  const src = await tempDir(t);
  const image = (name: string, path: string, body: string) => ({
    name,
    version: 'x',
    sha256: sha(body),
    size: body.length,
    path,
    roles: ['worker'] as Role[],
  });
  await writeFile(join(src, 'pause.oci.tar'), 'pause-image');
  await writeFile(join(src, 'busybox.oci.tar'), 'busybox-image');
  const payload = new DirectoryPayload(src, {
    kctl: '0.0.0-test',
    platform: 'linux/amd64',
    components: [],
    images: [
      image(PAUSE_IMAGE, 'pause.oci.tar', 'pause-image'),
      image(BUSYBOX_IMAGE, 'busybox.oci.tar', 'busybox-image'),
    ],
  });
  const { log } = captureLogger();
  const workerDir = await tempDir(t);
  await stageImages(payload, workerDir, log);
  assert.deepEqual((await readdir(workerDir)).filter((f) => !f.startsWith('.')).sort(), [
    'busybox.oci.tar',
    'pause.oci.tar',
  ]);
  const out = await tempDir(t);
  assert.deepEqual(
    (await saveBundledImages(payload, [PAUSE_IMAGE], out, log)).map((e) => e.name),
    [PAUSE_IMAGE],
  );
  assert.equal(await readFile(join(out, 'pause.oci.tar'), 'utf8'), 'pause-image');
  // Only the tarball: no stamps or lock file left in an operator's export directory.
  assert.deepEqual(await readdir(out), ['pause.oci.tar']);
  await assert.rejects(
    saveBundledImages(payload, ['example.com/nope:1'], out, log),
    /^Error: kctl carries no image example.com\/nope:1; kctl airgap list-images names those it does$/,
  );
  // The proxy-agent image is made from the built executable, which a checkout's payload is not.
  await assert.rejects(
    saveBundledImages(payload, [PROXY_AGENT_IMAGE], out, log),
    /is made from the kctl executable itself; run save-images with the built kctl/,
  );
});

test('components with the same bytes (a multi-call binary) stage as hard links of one file, across role sets and restarts', async (t) => {
  const src = await tempDir(t);
  const bin = join(await tempDir(t), 'bin');
  const kube = 'multi-call-kubernetes-'.repeat(3000);
  const payload = await fakePayload(src, [
    { name: 'kube-apiserver', body: kube, roles: ['controller'] },
    { name: 'kube-scheduler', body: kube, roles: ['controller'] },
    { name: 'kubectl', body: kube, roles: ['controller', 'worker'] },
    { name: 'kubelet', body: kube, roles: ['worker'] },
    { name: 'etcd', body: 'etcd', roles: ['controller'] },
  ]);
  const cap = captureLogger();
  const first = await stageComponents(payload, bin, ['controller'], cap.log);
  assert.deepEqual(first.staged, ['kube-apiserver', 'kube-scheduler', 'kubectl', 'etcd']);
  const ino = (await stat(join(bin, 'kube-apiserver'))).ino;
  for (const name of ['kube-scheduler', 'kubectl'])
    assert.equal((await stat(join(bin, name))).ino, ino, `${name} is a copy`);
  assert.notEqual((await stat(join(bin, 'etcd'))).ino, ino);

  // The worker's set on the same host links to the controller's file instead of writing another.
  const worker = await stageComponents(payload, bin, ['worker'], cap.log);
  assert.deepEqual(worker.staged, ['kubelet']);
  assert.equal((await stat(join(bin, 'kubelet'))).ino, ino);
  assert.equal((await stat(join(bin, 'kubelet'))).nlink, 4);

  // Links changed the inode's ctime; every stamp was renewed, so a restart hashes nothing.
  for (const roles of [['controller'], ['worker']] as Role[][]) {
    const again = await stageComponents(payload, bin, roles, cap.log);
    assert.deepEqual([again.staged, again.replaced], [[], []]);
  }
  const stamps = JSON.parse(await readFile(join(bin, '.verified.json'), 'utf8')) as Record<string, { ctimeMs: number }>;
  assert.equal(stamps['kube-apiserver']!.ctimeMs, (await stat(join(bin, 'kube-apiserver'))).ctimeMs);

  // A foreign file under one of the names is replaced by a link, and logged.
  await writeFile(join(bin, 'kube-scheduler.new'), 'evil');
  await rename(join(bin, 'kube-scheduler.new'), join(bin, 'kube-scheduler'));
  const fixed = await stageComponents(payload, bin, ['controller'], cap.log);
  assert.deepEqual(fixed.replaced, ['kube-scheduler']);
  assert.equal((await stat(join(bin, 'kube-scheduler'))).ino, ino);
  assert.ok(
    cap
      .lines()
      .some(
        (l) =>
          l.msg === 'replaced a corrupted or foreign component binary' && String(l.file).endsWith('kube-scheduler'),
      ),
  );
  assert.deepEqual(
    (await readdir(bin)).filter((f) => f.includes('.tmp') || f.includes('.link')),
    [],
  );
});
