// Which of the images the conformance suite lists kctl builds: those [Conformance] specs run, under
// the exact names listed; the others are named as left out; an image no recipe knows stops the build.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { conformanceImageNames } from '../../../assets/conformance-images.ts';

// A part of what `e2e.test --list-images` printed for v1.36.3.
const LISTED = [
  'registry.k8s.io/e2e-test-images/agnhost:2.63.0',
  'registry.k8s.io/e2e-test-images/agnhost:2.55',
  'gcr.io/k8s-authenticated-test/agnhost:2.6',
  'registry.k8s.io/e2e-test-images/busybox:1.37.0-1',
  'registry.k8s.io/e2e-test-images/busybox:1.36.1-1',
  'registry.k8s.io/e2e-test-images/nginx:1.15-4',
  'registry.k8s.io/e2e-test-images/nginx:1.27-0',
  'registry.k8s.io/pause:3.10.2',
  'registry.k8s.io/etcd:3.6.8-0',
  'registry.k8s.io/sig-storage/csi-attacher:v4.11.0',
  'invalid.registry.k8s.io/invalid/alpine:3.1',
  'registry.k8s.io/e2e-test-images/volume/nfs:1.6.0',
];

test('the conformance specs’ images are built under their listed names; other specs’ images are left out by name or tag', () => {
  const { build, skipped } = conformanceImageNames(LISTED);
  assert.deepEqual(build, [
    'registry.k8s.io/e2e-test-images/agnhost:2.63.0',
    'registry.k8s.io/e2e-test-images/agnhost:2.55',
    'registry.k8s.io/e2e-test-images/busybox:1.37.0-1',
    'registry.k8s.io/e2e-test-images/nginx:1.15-4',
    'registry.k8s.io/pause:3.10.2',
    'registry.k8s.io/etcd:3.6.8-0',
  ]);
  assert.deepEqual(skipped, [
    'gcr.io/k8s-authenticated-test/agnhost:2.6',
    'registry.k8s.io/e2e-test-images/busybox:1.36.1-1',
    'registry.k8s.io/e2e-test-images/nginx:1.27-0',
    'registry.k8s.io/sig-storage/csi-attacher:v4.11.0',
    'invalid.registry.k8s.io/invalid/alpine:3.1',
    'registry.k8s.io/e2e-test-images/volume/nfs:1.6.0',
  ]);
});

test('an image the suite lists that no recipe knows stops the build, naming it and where to add one', () => {
  assert.throws(
    () => conformanceImageNames(['registry.k8s.io/e2e-test-images/newthing:1.0']),
    /lists registry\.k8s\.io\/e2e-test-images\/newthing:1\.0, which has no recipe in assets\/conformance-images\.ts/,
  );
});
