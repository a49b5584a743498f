// Builds the images kctl ships instead of pulling from a registry (DESIGN.md, Test lab):
//   registry.k8s.io/pause:3.10      our own static pause (assets/images/pause.c)
//   docker.io/library/busybox:1.36  Debian's busybox-static with its applet links
//   CoreDNS and metrics-server      their static binaries (components.json, role "image") alone,
//                                   under upstream's image names and tags
// Each becomes an OCI image-layout tarball (oci-layout, index.json, blobs/sha256/...) with
// fixed mtimes and ownership, so the bytes are reproducible. Output is cached in
// <cacheRoot()>/images/ and rebuilt only when an input changes. Prints the tarball paths.
//
//   tsx assets/build-images.ts
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { execa } from 'execa';
import { create as tarCreate } from 'tar';
import { cacheRoot, loadManifest } from '../src/payload/manifest.ts';
import { BUNDLED_IMAGES, BUSYBOX_IMAGE, COREDNS_IMAGE, METRICS_SERVER_IMAGE, PAUSE_IMAGE, PROXY_AGENT_IMAGE } from '../src/payload/images.ts';
import { ensureDebianPackages } from './debian.ts';

/** Bump when the builder's output changes for the same inputs. */
const BUILDER_VERSION = '1';
const EPOCH = new Date('2025-01-01T00:00:00Z');
const PATH_ENV = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
const BUSYBOX = '/bin/busybox';
const PAUSE_SOURCE = new URL('./images/pause.c', import.meta.url).pathname;

const MEDIA = {
  index: 'application/vnd.oci.image.index.v1+json',
  manifest: 'application/vnd.oci.image.manifest.v1+json',
  config: 'application/vnd.oci.image.config.v1+json',
  layer: 'application/vnd.oci.image.layer.v1.tar+gzip',
};

interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
}

/** A root filesystem to pack: paths relative to its root, in the order they go into the layer. */
export interface ImageSpec {
  name: string;
  file: string;
  /** Fills `root` and returns every path to pack (directories before their contents). */
  populate(root: string): Promise<string[]>;
  config: Record<string, unknown>;
  /** Changes when the image's inputs change. */
  inputsKey: string;
}

const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

/** A tar of `entries` under `cwd`: fixed mtime, uid/gid 0, no user names, in the given order. */
async function packTar(cwd: string, entries: string[]): Promise<Buffer> {
  const out = join(cwd, '..', `.${process.pid}.${Date.now()}.tar`);
  // node-tar's `portable` would also clear group/other write bits (a 1777 /tmp becomes 1755),
  // so each entry is normalised here instead: owner root, no user name, the file's own mode.
  const normalise = (e: unknown) => {
    const entry = e as { portable: boolean; myuid: number; stat: { uid: number; gid: number; atime: Date; ctime: Date } };
    entry.portable = false;
    entry.myuid = -1;
    entry.stat.uid = 0;
    entry.stat.gid = 0;
    // Non-portable headers carry atime and ctime too.
    entry.stat.atime = EPOCH;
    entry.stat.ctime = EPOCH;
  };
  await tarCreate({ cwd, file: out, mtime: EPOCH, noDirRecurse: true, noPax: true, onWriteEntry: normalise }, entries);
  const buf = await readFile(out);
  await rm(out, { force: true });
  return buf;
}

const fileOf = (name: string): string => BUNDLED_IMAGES.find((i) => i.name === name)!.file;

async function writeBlob(blobs: string, data: Buffer, mediaType: string): Promise<Descriptor> {
  const digest = sha256(data);
  await writeFile(join(blobs, digest), data);
  return { mediaType, digest: `sha256:${digest}`, size: data.length };
}

async function buildImage(spec: ImageSpec, target: string): Promise<void> {
  const work = await mkdtemp(join(tmpdir(), 'kctl-image-'));
  try {
    const rootfs = join(work, 'rootfs');
    await mkdir(rootfs);
    const layerTar = await packTar(rootfs, await spec.populate(rootfs));
    // zlib writes mtime 0 and a fixed OS byte: the gzip bytes depend on the tar bytes only.
    const layerGz = gzipSync(layerTar, { level: 9 });

    const layout = join(work, 'layout');
    const blobs = join(layout, 'blobs', 'sha256');
    await mkdir(blobs, { recursive: true });
    const layer = await writeBlob(blobs, layerGz, MEDIA.layer);
    const config = await writeBlob(
      blobs,
      Buffer.from(
        JSON.stringify({
          created: EPOCH.toISOString(),
          architecture: 'amd64',
          os: 'linux',
          config: spec.config,
          rootfs: { type: 'layers', diff_ids: [`sha256:${sha256(layerTar)}`] },
          history: [{ created: EPOCH.toISOString(), created_by: 'kctl assets/build-images.ts' }],
        }),
      ),
      MEDIA.config,
    );
    const manifest = await writeBlob(
      blobs,
      Buffer.from(
        JSON.stringify({
          schemaVersion: 2,
          mediaType: MEDIA.manifest,
          config,
          layers: [layer],
        }),
      ),
      MEDIA.manifest,
    );
    const tag = spec.name.slice(spec.name.lastIndexOf(':') + 1);
    await writeFile(join(layout, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
    await writeFile(
      join(layout, 'index.json'),
      JSON.stringify({
        schemaVersion: 2,
        mediaType: MEDIA.index,
        manifests: [
          {
            ...manifest,
            platform: { architecture: 'amd64', os: 'linux' },
            // docker/nerdctl save convention: ref.name is the tag; containerd reads the full name.
            annotations: { 'io.containerd.image.name': spec.name, 'org.opencontainers.image.ref.name': tag },
          },
        ],
      }),
    );
    const blobNames = [layer, config, manifest].map((d) => d.digest.slice('sha256:'.length)).sort();
    const outer = await packTar(layout, ['oci-layout', 'index.json', 'blobs', 'blobs/sha256', ...blobNames.map((b) => `blobs/sha256/${b}`)]);
    await mkdir(dirname(target), { recursive: true });
    await writeFile(`${target}.tmp`, outer);
    await rename(`${target}.tmp`, target);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

async function pauseSpec(): Promise<ImageSpec> {
  const source = await readFile(PAUSE_SOURCE);
  const gcc = (await execa('gcc', ['--version'])).stdout.split('\n')[0] ?? '';
  return {
    name: PAUSE_IMAGE,
    file: fileOf(PAUSE_IMAGE),
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

async function busyboxSpec(): Promise<ImageSpec> {
  const binary = await readFile(BUSYBOX);
  const applets = (await execa(BUSYBOX, ['--list'])).stdout
    .split('\n')
    .map((s) => s.trim())
    .filter((a) => /^[a-z0-9_.[-]+$/.test(a) && a !== 'busybox')
    .sort();
  return {
    name: BUSYBOX_IMAGE,
    file: fileOf(BUSYBOX_IMAGE),
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
      await writeFile(join(root, 'etc', 'passwd'), 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n', {
        mode: 0o644,
      });
      await writeFile(join(root, 'etc', 'group'), 'root:x:0:\nnogroup:x:65534:\n', { mode: 0o644 });
      return [...dirs.map(([d]) => d), 'bin/busybox', ...applets.map((a) => `bin/${a}`), 'usr/bin/env', 'etc/passwd', 'etc/group'].sort();
    },
  };
}

/** An image of one static binary at /<name> (built by build-components.ts), its entrypoint, with /tmp. */
export async function staticBinarySpec(o: { name: string; file: string; binary: string; config: Record<string, unknown> }): Promise<ImageSpec> {
  const bytes = await readFile(o.binary);
  const exe = o.binary.slice(o.binary.lastIndexOf('/') + 1);
  return {
    name: o.name,
    file: o.file,
    inputsKey: sha256(`${BUILDER_VERSION}\n${JSON.stringify(o.config)}\n${sha256(bytes)}`),
    config: { Entrypoint: [`/${exe}`], Env: [PATH_ENV], WorkingDir: '/', ...o.config },
    async populate(root) {
      await writeFile(join(root, exe), bytes, { mode: 0o755 });
      await mkdir(join(root, 'tmp'));
      await chmod(join(root, 'tmp'), 0o1777);
      return [exe, 'tmp'];
    },
  };
}

/** The shared libraries `binary` loads (ldd), with the loader: what a dynamically linked program needs in an image. */
async function sharedLibraries(binary: string): Promise<string[]> {
  const { stdout } = await execa('ldd', [binary]);
  return stdout
    .split('\n')
    .map((l) => /(?:=>\s*)?(\/\S+)\s+\(0x/.exec(l)?.[1])
    .filter((p): p is string => p !== undefined);
}

/**
 * kctl as upstream's proxy-agent: /proxy-agent is the kctl executable without its component
 * payload (Node and kctl's code; the name selects the agent), plus the C libraries Node loads,
 * at the paths the loader looks for them, and /tmp. Runs as nobody, like upstream's image.
 */
export async function proxyAgentSpec(sea: string): Promise<ImageSpec> {
  const bytes = await readFile(sea);
  const libs = await sharedLibraries(sea);
  return {
    name: PROXY_AGENT_IMAGE,
    file: fileOf(PROXY_AGENT_IMAGE),
    inputsKey: sha256(`${BUILDER_VERSION}\n${sha256(bytes)}\n${libs.join(',')}`),
    config: { Entrypoint: ['/proxy-agent'], Env: [PATH_ENV], WorkingDir: '/', User: '65534:65534' },
    async populate(root) {
      await writeFile(join(root, 'proxy-agent'), bytes, { mode: 0o755 });
      await mkdir(join(root, 'tmp'));
      await chmod(join(root, 'tmp'), 0o1777);
      const entries = new Set<string>(['proxy-agent', 'tmp']);
      for (const lib of libs) {
        const rel = lib.slice(1);
        const parts = rel.split('/');
        for (let i = 1; i < parts.length; i++) entries.add(parts.slice(0, i).join('/'));
        await mkdir(join(root, dirname(rel)), { recursive: true });
        await writeFile(join(root, rel), await readFile(lib), { mode: 0o755 });
        entries.add(rel);
      }
      // Directories sort before their contents.
      return [...entries].sort();
    },
  };
}

/** The component build dir of this checkout's manifest (where build-components.ts put the binaries). */
function componentBinDir(): string {
  return join(cacheRoot(), 'components', loadManifest().key, 'bin');
}

/** Builds what is missing or stale; returns the tarball paths, in BUNDLED_IMAGES order. */
export async function buildImages(outDir = join(cacheRoot(), 'images'), binDir = componentBinDir()): Promise<string[]> {
  await ensureDebianPackages(['busybox-static', 'gcc', 'libc6-dev']);
  const specs = [
    await pauseSpec(),
    await busyboxSpec(),
    // CoreDNS binds :53; the add-on's manifest grants NET_BIND_SERVICE and nothing else.
    await staticBinarySpec({ name: COREDNS_IMAGE, file: fileOf(COREDNS_IMAGE), binary: join(binDir, 'coredns'), config: {} }),
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
