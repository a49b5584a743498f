// The pin set of dist/kctl-previous, derived from assets/components.json (assets/kubernetes-pins.ts).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadManifest } from '../../../src/payload/manifest.ts';
import { stagingVersionOf, withKubernetesVersion } from '../../../assets/kubernetes-pins.ts';

const base = loadManifest();
const pinned = base.manifest.sources.kubernetes!.version;

test('another Kubernetes version changes the Kubernetes pins and nothing else', () => {
  const derived = withKubernetesVersion(base, 'v1.36.1');
  assert.notEqual(derived.key, base.key, 'its own build cache key');
  const kube = derived.manifest.sources.kubernetes!;
  assert.equal(kube.version, 'v1.36.1');
  assert.equal(kube.stagingVersion, 'v0.36.1');
  assert.match(kube.ldflags, /version\.gitVersion=v1\.36\.1'/);
  assert.ok(!kube.ldflags.includes(pinned), 'no version string of the pinned release is stamped');
  const others = (set: typeof base) =>
    JSON.stringify([
      Object.entries(set.manifest.sources).filter(([name]) => name !== 'kubernetes'),
      set.manifest.platform,
    ]);
  assert.equal(others(derived), others(base), 'every other source keeps its pins');
  for (const [i, c] of derived.manifest.components.entries()) {
    if (c.source !== 'kubernetes') {
      assert.deepEqual(c, base.manifest.components[i]);
      continue;
    }
    assert.ok(!JSON.stringify(c).includes(pinned), `${c.name} names no ${pinned}`);
    assert.match(c.versionCheck!.expect, /v1\.36\.1$/);
    assert.equal(c.download!.sha256, null, `${c.name}: the pinned checksum is for ${pinned}`);
    assert.equal(c.download!.sha256Url, `${c.download!.url}.sha256`);
  }
});

test('the pinned Kubernetes version derives the pinned set (same cache key)', () => {
  assert.equal(withKubernetesVersion(base, pinned).key, base.key);
});

test('a version that is not a Kubernetes release is refused', () => {
  assert.equal(stagingVersionOf('v1.36.1'), 'v0.36.1');
  assert.throws(() => withKubernetesVersion(base, '1.36.1'), /not a Kubernetes release version/);
  assert.throws(() => withKubernetesVersion(base, 'v1.36'), /not a Kubernetes release version/);
});
