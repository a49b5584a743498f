// What `npm run conformance` runs, built in the air gap from the pinned Kubernetes source (the
// same module and version the components are built from, assets/components.json):
//   e2e.test  the conformance suite (`go test -c` of k8s.io/kubernetes/test/e2e), with the
//             version stamps a release carries, so it knows which Kubernetes it certifies
//   ginkgo    the suite's runner, at the version the Kubernetes module requires
//   images    every image the [Conformance] specs run, under upstream's names
//             (conformance-images.ts; what each is made of is in test/conformance/README.md)
// Cached in <cacheRoot()>/conformance/<key>, keyed by the Kubernetes pin and this builder's
// version; a fresh clone on the same machine builds nothing.
//
//   tsx assets/build-conformance.ts        prints the cache directory
import { execa } from 'execa';
import { existsSync } from 'node:fs';
import { rename } from 'node:fs/promises';
import { join } from 'node:path';
import { messageOf } from '../src/base/errors.ts';
import { cacheRoot, loadManifest, type SourcePin } from '../src/payload/manifest.ts';
import { sha256 } from '../src/payload/oci.ts';
import { goBuild, goEnv, prepareSource, withDirLock, type PreparedSource } from './build-components.ts';
import { buildConformanceImages } from './conformance-images.ts';
import { progress } from './progress.ts';

/** Bump when the output changes for the same pins. */
const BUILDER_VERSION = '1';

export interface ConformanceBuild {
  dir: string;
  e2eTest: string;
  ginkgo: string;
  /** The Kubernetes version the suite is of (v1.36.3). */
  version: string;
  /** One OCI image-layout tarball per image, to import into every node. */
  images: string[];
}

/** The Kubernetes source pin the suite is built from. */
function kubernetesPin(): SourcePin {
  const pin = loadManifest().manifest.sources.kubernetes;
  if (!pin) throw new Error('assets/components.json names no kubernetes source; the suite is built from it');
  return pin;
}

/** `go test -c` of the suite: goBuild's flags, but a test binary and no vet (a third of the time otherwise). */
async function goTestBinary(src: PreparedSource, pin: SourcePin, pkg: string, out: string): Promise<void> {
  const ldflags = pin.ldflags.replaceAll('{time}', src.time);
  const args = ['test', '-c', '-vet=off', '-trimpath', '-ldflags', ldflags, '-o', `${out}.tmp`, pkg];
  const r = await execa('go', args, { cwd: src.dir, env: goEnv(pin), reject: false, all: true });
  if (r.exitCode !== 0) throw new Error(`go test -c ${pkg} failed:\n${r.all}`);
  await rename(`${out}.tmp`, out);
}

/** Builds what is missing (one build at a time: a second waits for the first); returns where everything is. */
export async function buildConformance(): Promise<ConformanceBuild> {
  const pin = kubernetesPin();
  const key = sha256(`${BUILDER_VERSION}\n${JSON.stringify(pin)}`).slice(0, 16);
  const dir = join(cacheRoot(), 'conformance', key);
  // The first build compiles e2e.test for many minutes: a second waits up to two hours.
  return withDirLock(dir, 'conformance', 7200, () => build(dir, pin));
}

async function build(dir: string, pin: SourcePin): Promise<ConformanceBuild> {
  const e2eTest = join(dir, 'e2e.test');
  const ginkgo = join(dir, 'ginkgo');
  const todo = [e2eTest, ginkgo].filter((f) => !existsSync(f));
  if (todo.length) {
    const bar = progress(todo.length, 'conformance');
    // Its own copy of the source: the suite's test-only modules stay out of the components' go.mod.
    const src = await prepareSource('kubernetes-conformance', pin);
    if (todo.includes(e2eTest)) {
      bar.step(`e2e.test ${pin.version} (a large build: about 10 minutes on two cores)`);
      await goTestBinary(src, pin, './test/e2e', e2eTest);
    }
    if (todo.includes(ginkgo)) {
      bar.step('ginkgo (the version the Kubernetes module requires)');
      await goBuild('ginkgo', pin, src, 'github.com/onsi/ginkgo/v2/ginkgo', ginkgo);
    }
    bar.done();
  }
  const listed = (await execa(e2eTest, ['--list-images'])).stdout.split('\n').filter(Boolean);
  const images = await buildConformanceImages(join(dir, 'images'), {
    pin,
    prepare: () => prepareSource('kubernetes-conformance', pin),
    listed,
  });
  return { dir, e2eTest, ginkgo, version: pin.version, images };
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  try {
    process.stdout.write(`${(await buildConformance()).dir}\n`);
  } catch (err) {
    process.stderr.write(`conformance build: ${messageOf(err)}\n`);
    process.exit(1);
  }
}
