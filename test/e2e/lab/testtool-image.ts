// The image of kctl's test tool (fixtures/testtool/main.go: an admission webhook, a resolver
// check that uses the search path as applications do, and a sleeper): a static Go binary
// alone in an OCI image, built with the machine's Go toolchain, cached beside the bundled images.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { buildIfStale, staticBinarySpec } from '../../../assets/build-images.ts';
import { cacheRoot } from '../../../src/payload/manifest.ts';

export const TESTTOOL_IMAGE = 'kctl.dev/test/testtool:1';
export const TESTTOOL_TAR = 'kctl-test-tool.oci.tar';
const SOURCE = new URL('./fixtures/testtool/main.go', import.meta.url).pathname;

/** Builds (or reuses) the image; returns its OCI tarball path. */
export async function testtoolImage(): Promise<string> {
  const work = await mkdtemp(join(tmpdir(), 'kctl-testtool-'));
  try {
    const binary = join(work, 'kctl-test-tool');
    // CGO off: Go's own resolver, which reads resolv.conf (search path, ndots) like glibc does.
    const r = await execa('go', ['build', '-trimpath', '-ldflags', '-s -w', '-o', binary, SOURCE], {
      env: { CGO_ENABLED: '0', GO111MODULE: 'off' },
      reject: false,
      all: true,
    });
    if (r.exitCode !== 0) throw new Error(`go build of the test tool failed:\n${r.all}`);
    const spec = await staticBinarySpec({
      name: TESTTOOL_IMAGE,
      file: TESTTOOL_TAR,
      binary,
      config: { User: '65534:65534' },
    });
    return await buildIfStale(spec, join(cacheRoot(), 'test-images'));
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}
