// Builds the images kctl ships instead of pulling from a registry (no registry is reachable from the test hosts):
//   registry.k8s.io/pause:3.10      our own static pause (assets/images/pause.c)
//   docker.io/library/busybox:1.37  busybox 1.37.0 built from its release source (build-busybox.ts)
//                                   with its applet links
//   CoreDNS and metrics-server      their static binaries (components.json, role "image") alone,
//                                   under upstream's image names and tags, in a zstd layer
// Each becomes an OCI image-layout tarball (oci-layout, index.json, blobs/sha256/...) with
// fixed mtimes and ownership, so the bytes are reproducible. Output is cached in
// <cacheRoot()>/images/ and rebuilt only when an input changes. Prints the tarball paths.
//
//   tsx assets/build-images.ts
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { cacheRoot, componentsDir, loadManifest } from '../src/payload/manifest.ts';
import {
  BUNDLED_IMAGES,
  BUSYBOX_IMAGE,
  COREDNS_IMAGE,
  METRICS_SERVER_IMAGE,
  PAUSE_IMAGE,
} from '../src/payload/images.ts';
import { buildImage, PATH_ENV, sha256, type OciImage } from '../src/payload/oci.ts';
import { buildBusybox } from './build-busybox.ts';
import { ensureDebianPackages } from './debian.ts';

/** Bump when the builder's output changes for the same inputs. */
const BUILDER_VERSION = '2';
const PAUSE_SOURCE = new URL('./images/pause.c', import.meta.url).pathname;

/** An image the build caches: its tarball's file name and what its bytes depend on. */
export interface ImageSpec extends OciImage {
  file: string;
  /** Changes when the image's inputs change. */
  inputsKey: string;
}

const fileOf = (name: string): string => BUNDLED_IMAGES.find((i) => i.name === name)!.file;

/** Our pause under `name` (the conformance images name it as their suite does). */
export async function pauseSpec(name = PAUSE_IMAGE, file = fileOf(PAUSE_IMAGE)): Promise<ImageSpec> {
  const source = await readFile(PAUSE_SOURCE);
  const gcc = (await execa('gcc', ['--version'])).stdout.split('\n')[0] ?? '';
  return {
    name,
    file,
    inputsKey: sha256(`${BUILDER_VERSION}\n${gcc}\n${sha256(source)}`),
    // Upstream's pause runs as 65535 too: the sandbox needs no privileges.
    config: { Entrypoint: ['/pause'], User: '65535:65535', Env: [PATH_ENV], WorkingDir: '/' },
    async populate(root) {
      await execa('gcc', ['-static', '-Os', '-s', '-o', join(root, 'pause'), PAUSE_SOURCE]);
      await chmod(join(root, 'pause'), 0o755);
      return ['pause'];
    },
  };
}

/** busybox built from its source (build-busybox.ts) under `name`. */
export async function busyboxSpec(name = BUSYBOX_IMAGE, file = fileOf(BUSYBOX_IMAGE)): Promise<ImageSpec> {
  const exe = await buildBusybox();
  const binary = await readFile(exe);
  const list = (await execa(exe, ['--list'])).stdout;
  const applets = list
    .split('\n')
    .map((s) => s.trim())
    .filter((a) => /^[a-z0-9_.[-]+$/.test(a) && a !== 'busybox')
    .sort();
  return {
    name,
    file,
    inputsKey: sha256(`${BUILDER_VERSION}\n${sha256(binary)}`),
    config: { Cmd: ['sh'], Env: [PATH_ENV], WorkingDir: '/' },
    async populate(root) {
      const dirs: [string, number][] = [
        ['bin', 0o755],
        ['etc', 0o755],
        ['root', 0o700],
        ['tmp', 0o1777],
        ['usr', 0o755],
        ['usr/bin', 0o755],
        ['var', 0o755],
      ];
      for (const [d, mode] of dirs) {
        await mkdir(join(root, d));
        await chmod(join(root, d), mode);
      }
      await writeFile(join(root, 'bin', 'busybox'), binary, { mode: 0o755 });
      for (const a of applets) await symlink('busybox', join(root, 'bin', a));
      await symlink('../../bin/busybox', join(root, 'usr', 'bin', 'env'));
      await writeFile(
        join(root, 'etc', 'passwd'),
        'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n',
        {
          mode: 0o644,
        },
      );
      await writeFile(join(root, 'etc', 'group'), 'root:x:0:\nnogroup:x:65534:\n', { mode: 0o644 });
      return [
        ...dirs.map(([d]) => d),
        'bin/busybox',
        ...applets.map((a) => `bin/${a}`),
        'usr/bin/env',
        'etc/passwd',
        'etc/group',
      ].sort();
    },
  };
}

/** An image of one static binary at /<name> (built by build-components.ts), its entrypoint, with /tmp. */
export async function staticBinarySpec(o: {
  name: string;
  file: string;
  binary: string;
  config: Record<string, unknown>;
}): Promise<ImageSpec> {
  const bytes = await readFile(o.binary);
  const exe = o.binary.slice(o.binary.lastIndexOf('/') + 1);
  return {
    name: o.name,
    file: o.file,
    inputsKey: sha256(`${BUILDER_VERSION}\n${JSON.stringify(o.config)}\n${sha256(bytes)}`),
    config: { Entrypoint: [`/${exe}`], Env: [PATH_ENV], WorkingDir: '/', ...o.config },
    // A Go binary is the whole layer: zstd makes it a quarter smaller than gzip in dist/kctl.
    layerCodec: 'zstd',
    async populate(root) {
      await writeFile(join(root, exe), bytes, { mode: 0o755 });
      await mkdir(join(root, 'tmp'));
      await chmod(join(root, 'tmp'), 0o1777);
      return [exe, 'tmp'];
    },
  };
}

/** The component build dir of this checkout's manifest (where build-components.ts put the binaries). */
function componentBinDir(): string {
  return join(componentsDir(loadManifest().key), 'bin');
}

/** Builds what is missing or stale; returns the tarball paths, in BUNDLED_IMAGES order. */
export async function buildImages(outDir = join(cacheRoot(), 'images'), binDir = componentBinDir()): Promise<string[]> {
  await ensureDebianPackages(['gcc', 'libc6-dev']);
  const specs = [
    await pauseSpec(),
    await busyboxSpec(),
    // CoreDNS binds :53; the add-on's manifest grants NET_BIND_SERVICE and nothing else.
    await staticBinarySpec({
      name: COREDNS_IMAGE,
      file: fileOf(COREDNS_IMAGE),
      binary: join(binDir, 'coredns'),
      config: {},
    }),
    // Upstream's image runs metrics-server as an unprivileged user; so does this one.
    await staticBinarySpec({
      name: METRICS_SERVER_IMAGE,
      file: fileOf(METRICS_SERVER_IMAGE),
      binary: join(binDir, 'metrics-server'),
      config: { User: '65534:65534' },
    }),
  ];
  const paths: string[] = [];
  for (const spec of specs) paths.push(await buildIfStale(spec, outDir));
  return paths;
}

/** Builds `spec` into `outDir` unless the tarball there was built from the same inputs; returns its path. */
export async function buildIfStale(spec: ImageSpec, outDir: string): Promise<string> {
  const target = join(outDir, spec.file);
  const keyFile = `${target}.key`;
  const current = existsSync(target) && existsSync(keyFile) ? (await readFile(keyFile, 'utf8')).trim() : '';
  if (current !== spec.inputsKey) {
    await buildImage(spec, target);
    await writeFile(keyFile, `${spec.inputsKey}\n`);
  }
  return target;
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  for (const p of await buildImages()) process.stdout.write(`${p}\n`);
}
