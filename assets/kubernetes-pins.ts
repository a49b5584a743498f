// A pin set that differs from assets/components.json only in its Kubernetes version, derived
// in code so that the file (the main build's cache key) never changes for it. The derived set
// has its own cache key; every other source keeps its pins, so its builds are reused as they are.
import { buildKey, type ComponentPin, type ComponentSet, type Manifest } from '../src/payload/manifest.ts';

const KUBERNETES = 'kubernetes';

/** `v1.36.1` → `v0.36.1`: the version of the k8s.io/* staging modules that go with a Kubernetes release. */
export function stagingVersionOf(version: string): string {
  const m = /^v1\.(\d+\.\d+)$/.exec(version);
  if (!m) throw new Error(`${version} is not a Kubernetes release version (v1.MINOR.PATCH)`);
  return `v0.${m[1]}`;
}

/**
 * `set` with the Kubernetes source at `version`: the module version, the staging modules' version,
 * the version strings its ldflags stamp into the binaries, what the version check expects, and the
 * release download URLs. Official checksums are pinned for one version only, so the derived
 * downloads check the `.sha256` file published beside each binary instead.
 */
export function withKubernetesVersion(set: ComponentSet, version: string): ComponentSet {
  const source = set.manifest.sources[KUBERNETES];
  if (!source?.stagingVersion) throw new Error(`the pin set has no ${KUBERNETES} source with a stagingVersion`);
  if (source.stagingVersion !== stagingVersionOf(source.version))
    throw new Error(
      `${KUBERNETES} ${source.version} pins staging modules ${source.stagingVersion}; cannot derive another version from that`,
    );
  const swap = (text: string) => text.replaceAll(source.version, version);
  const manifest: Manifest = {
    ...set.manifest,
    sources: {
      ...set.manifest.sources,
      [KUBERNETES]: { ...source, version, stagingVersion: stagingVersionOf(version), ldflags: swap(source.ldflags) },
    },
    components: set.manifest.components.map((c) => (c.source === KUBERNETES ? withVersion(c, swap) : c)),
  };
  return { manifest, key: buildKey(manifest) };
}

function withVersion(c: ComponentPin, swap: (text: string) => string): ComponentPin {
  const { versionCheck, download } = c;
  return {
    ...c,
    ...(versionCheck && { versionCheck: { ...versionCheck, expect: swap(versionCheck.expect) } }),
    ...(download && {
      download: {
        ...download,
        url: swap(download.url),
        sha256: null,
        sha256Url: swap(download.sha256Url ?? `${download.url}.sha256`),
      },
    }),
  };
}
