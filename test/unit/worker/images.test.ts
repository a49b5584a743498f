// Image bundles: the names kctl ships, reading an OCI layout tarball's index, and ctr's listing.
import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { create as tarCreate } from 'tar';
import { BUNDLED_IMAGE_NAMES, WORKER_IMAGE_NAMES, imageTarballs } from '../../../src/payload/images.ts';
import { KCTL_VERSION } from '../../../src/base/version.ts';
import { parseImageList, readTarEntry, tarballImages } from '../../../src/worker/images.ts';
import { tempDir } from '../../helpers.ts';

test('the bundled images are pause, busybox and the add-ons’ images under upstream names, which workers import, and kctl as proxy-agent and whole (for control planes in pods), which they do not; a tarball each in the cache dir', () => {
  assert.deepEqual(BUNDLED_IMAGE_NAMES, [
    'registry.k8s.io/pause:3.10',
    'docker.io/library/busybox:1.37',
    'registry.k8s.io/coredns/coredns:v1.15.0',
    'registry.k8s.io/metrics-server/metrics-server:v0.9.0',
    `kctl.local/proxy-agent:v${KCTL_VERSION}`,
    `kctl.local/kctl:v${KCTL_VERSION}`,
  ]);
  assert.deepEqual([...WORKER_IMAGE_NAMES], BUNDLED_IMAGE_NAMES.slice(0, 4));
  assert.deepEqual(imageTarballs('/c'), [
    '/c/pause-3.10.oci.tar',
    '/c/busybox-1.37.oci.tar',
    '/c/coredns-v1.15.0.oci.tar',
    '/c/metrics-server-v0.9.0.oci.tar',
    '/c/proxy-agent.oci.tar',
    '/c/kctl.oci.tar',
  ]);
});

test('tarballImages reads image names and manifest digests from an OCI layout index', async (t) => {
  const dir = await tempDir(t);
  const layout = join(dir, 'layout');
  await mkdir(layout);
  await writeFile(join(layout, 'oci-layout'), '{"imageLayoutVersion":"1.0.0"}');
  await writeFile(
    join(layout, 'index.json'),
    JSON.stringify({
      schemaVersion: 2,
      manifests: [
        {
          digest: 'sha256:aaa',
          annotations: {
            'io.containerd.image.name': 'docker.io/library/busybox:1.37',
            'org.opencontainers.image.ref.name': '1.37',
          },
        },
        { digest: 'sha256:bbb', annotations: { 'org.opencontainers.image.ref.name': 'example.com/x:1' } },
        { digest: 'sha256:ccc', annotations: { 'org.opencontainers.image.ref.name': 'latest' } },
      ],
    }),
  );
  const file = join(dir, 'img.tar');
  await tarCreate({ cwd: layout, file }, ['oci-layout', 'index.json']);
  assert.deepEqual(
    [...(await tarballImages(file))],
    [
      ['docker.io/library/busybox:1.37', 'sha256:aaa'],
      ['example.com/x:1', 'sha256:bbb'],
    ],
  );

  // A tarball without index.json (docker-archive) names nothing: it is always imported.
  const other = join(dir, 'docker.tar');
  await tarCreate({ cwd: layout, file: other }, ['oci-layout']);
  assert.equal((await tarballImages(other)).size, 0);
});

test('parseImageList maps ctr images ls rows to target digests', () => {
  const out = [
    'REF                             TYPE                                       DIGEST                                                                  SIZE      PLATFORMS   LABELS',
    'docker.io/library/busybox:1.37  application/vnd.oci.image.manifest.v1+json sha256:701420c4b031a653ca06f1050d9d750ccd1bfd18d5f4602766417a10ceedd583 1.0 MiB   linux/amd64 io.cri-containerd.image=managed',
    'registry.k8s.io/pause:3.10      application/vnd.oci.image.manifest.v1+json sha256:dea8d7cee4f7222ba1c9443009ba42776a4d3e8c0d35c0b3b30f0cfc8de24964 304.6 KiB linux/amd64 io.cri-containerd.image=managed,io.cri-containerd.pinned=pinned',
    '',
  ].join('\n');
  const m = parseImageList(out);
  assert.equal(m.size, 2);
  assert.equal(
    m.get('registry.k8s.io/pause:3.10'),
    'sha256:dea8d7cee4f7222ba1c9443009ba42776a4d3e8c0d35c0b3b30f0cfc8de24964',
  );
});

test('readTarEntry finds an entry by seeking over the others: long (pax) names, odd sizes, ./ prefixes', async (t) => {
  const dir = await tempDir(t);
  const layout = join(dir, 'layout');
  const long = `blobs/sha256/${'d'.repeat(64)}/${'e'.repeat(120)}`;
  await mkdir(join(layout, long, '..'), { recursive: true });
  await writeFile(join(layout, long), Buffer.alloc(70_001, 7));
  await writeFile(join(layout, 'small'), 'x');
  await writeFile(join(layout, 'index.json'), '{"manifests":[]}');
  const file = join(dir, 'img.tar');
  await tarCreate({ cwd: layout, file }, [long, 'small', './index.json']);
  assert.equal((await readTarEntry(file, (p) => p === 'index.json'))?.toString(), '{"manifests":[]}');
  assert.equal((await readTarEntry(file, (p) => p === 'small'))?.toString(), 'x');
  assert.deepEqual(await readTarEntry(file, (p) => p === long), Buffer.alloc(70_001, 7));
  assert.equal(await readTarEntry(file, (p) => p === 'missing'), undefined);
});
