// `npm run components`: build the pinned component set from its Go modules (default), or
// take the official release downloads (`-- --download`). Output goes to a cache outside the
// checkout, keyed by the pin set (assets/components.json, or one derived from it in code:
// build-test-kctls.ts), and ends with payload.lock.json (sha256 list).
import { execa } from 'execa';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { copyFile, cp, link, mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import lockfile from 'proper-lockfile';
import { errnoOf } from '../src/base/errors.ts';
import {
  cacheRoot,
  componentRelPath,
  componentsDir,
  componentVersion,
  loadManifest,
  multiCallMain,
  type ComponentPin,
  type ComponentSet,
  type LockEntry,
  type Manifest,
  type PayloadLock,
  type SourcePin,
} from '../src/payload/manifest.ts';
import { ensureDebianPackages } from './debian.ts';
import { downloadComponents } from './download-components.ts';
import { progress } from './progress.ts';
import { checkVersion } from '../src/payload/verify.ts';

/** A component set's build: its cache directory, and the multi-call binaries built so far in this run. */
interface Build extends ComponentSet {
  outDir: string;
  lockPath: string;
  multiCall: Map<string, Promise<string>>;
}

/** Where a component set is built and what it built, once complete. */
export interface BuiltComponents {
  lock: PayloadLock;
  binDir: string;
}

function buildOf(set: ComponentSet): Build {
  const outDir = componentsDir(set.key);
  return { ...set, outDir, lockPath: join(outDir, 'payload.lock.json'), multiCall: new Map() };
}

async function sha256File(path: string): Promise<string> {
  return createHash('sha256')
    .update(await readFile(path))
    .digest('hex');
}

export interface PreparedSource {
  dir: string;
  time: string;
}

/** Go refuses `go install` on modules with in-repo replaces; copy the module and pin those to published versions. */
export async function prepareSource(name: string, pin: SourcePin): Promise<PreparedSource> {
  const env = goEnv(pin);
  const dl = await execa('go', ['mod', 'download', '-json', `${pin.module}@${pin.version}`], {
    env,
    cwd: '/',
    reject: false,
  });
  const info = JSON.parse(dl.stdout || '{}') as { Dir?: string; Time?: string; Error?: string };
  if (!info.Dir) throw new Error(`go mod download ${pin.module}@${pin.version} failed: ${info.Error ?? dl.stderr}`);
  const dir = join(cacheRoot(), 'src', `${name}@${pin.version}`);
  const marker = join(dir, '.kctl-prepared');
  if (existsSync(marker)) return { dir, time: info.Time ?? '' };
  await rm(dir, { recursive: true, force: true });
  await cp(info.Dir, dir, { recursive: true });
  await execa('chmod', ['-R', 'u+w', dir]);
  for (const stray of ['go.work', 'go.work.sum', 'vendor'])
    await rm(join(dir, stray), { recursive: true, force: true });
  const mod = JSON.parse((await execa('go', ['mod', 'edit', '-json'], { cwd: dir, env })).stdout) as {
    Require?: { Path: string; Version: string }[];
    Replace?: { Old: { Path: string }; New: { Path: string; Version?: string } }[];
  };
  const edits: string[] = [];
  for (const r of mod.Replace ?? []) {
    if (!r.New.Path.startsWith('./') && !r.New.Path.startsWith('../')) continue;
    edits.push(`-dropreplace=${r.Old.Path}`);
    const req = mod.Require?.find((q) => q.Path === r.Old.Path);
    if (req && req.Version === 'v0.0.0' && pin.stagingVersion)
      edits.push(`-require=${r.Old.Path}@${pin.stagingVersion}`);
  }
  if (edits.length) await execa('go', ['mod', 'edit', ...edits], { cwd: dir, env });
  await writeFile(marker, `${pin.module}@${pin.version}\n`);
  return { dir, time: info.Time ?? '' };
}

export function goEnv(pin: SourcePin): Record<string, string> {
  const env: Record<string, string> = {
    GOFLAGS: '-mod=mod -buildvcs=false',
    GOWORK: 'off',
    CGO_ENABLED: pin.cgo ? '1' : '0',
  };
  if (pin.noSumDb) env.GONOSUMDB = pin.module;
  if (pin.cflags) env.CGO_CFLAGS = pin.cflags;
  return env;
}

/** `go build` of `pkg` in the prepared source with the pin's flags, written to `out` atomically. */
export async function goBuild(
  name: string,
  pin: SourcePin,
  src: PreparedSource,
  pkg: string,
  out: string,
): Promise<void> {
  await mkdir(join(out, '..'), { recursive: true });
  const ldflags = pin.ldflags.replaceAll('{time}', src.time);
  const args = ['build', '-trimpath', '-ldflags', ldflags, '-o', `${out}.tmp`];
  if (pin.tags?.length) args.push('-tags', pin.tags.join(','));
  args.push(pkg);
  const r = await execa('go', args, { cwd: src.dir, env: goEnv(pin), reject: false, all: true });
  if (r.exitCode !== 0) throw new Error(`go build ${name} failed:\n${r.all}`);
  await rename(`${out}.tmp`, out);
}

/** The source's multi-call binary, built once: its main file goes into the module as cmd/kctl-multicall. */
function multiCallBinary(b: Build, source: string, pin: SourcePin, src: PreparedSource, main: string): Promise<string> {
  let built = b.multiCall.get(source);
  if (!built) {
    built = (async () => {
      const out = join(b.outDir, 'bin', '.multicall', source);
      await mkdir(join(src.dir, 'cmd', 'kctl-multicall'), { recursive: true });
      await copyFile(main, join(src.dir, 'cmd', 'kctl-multicall', 'main.go'));
      await goBuild(`${source} (multi-call)`, pin, src, './cmd/kctl-multicall', out);
      return out;
    })();
    b.multiCall.set(source, built);
  }
  return built;
}

async function buildComponent(b: Build, c: ComponentPin, pin: SourcePin, src: PreparedSource): Promise<string> {
  const out = join(b.outDir, 'bin', componentRelPath(c));
  const main = multiCallMain(pin);
  if (!main) {
    await goBuild(c.name, pin, src, c.package, out);
    return out;
  }
  // One binary, one hard link per component name (the name selects the component).
  await linkOrCopy(await multiCallBinary(b, c.source, pin, src, main), out);
  return out;
}

async function linkOrCopy(from: string, to: string): Promise<void> {
  await mkdir(dirname(to), { recursive: true });
  await rm(to, { force: true });
  await link(from, to).catch(() => copyFile(from, to));
}

async function readLock(lockPath: string): Promise<PayloadLock | null> {
  try {
    return JSON.parse(await readFile(lockPath, 'utf8')) as PayloadLock;
  } catch {
    return null;
  }
}

async function lockEntry(m: Manifest, c: ComponentPin, path: string): Promise<LockEntry> {
  return {
    name: c.name,
    version: componentVersion(m, c),
    sha256: await sha256File(path),
    size: (await stat(path)).size,
    path: componentRelPath(c),
    roles: c.roles,
  };
}

/** The lock entry of `set` for each component whose file is in place. */
async function builtEntries(b: Build): Promise<Map<string, LockEntry>> {
  const lock = await readLock(b.lockPath);
  const have = (lock?.components ?? []).filter((e) => existsSync(join(b.outDir, 'bin', e.path)));
  return new Map(have.map((e) => [e.name, e]));
}

/**
 * Another set's build of `c`, when it was built from the very same pins (source and component),
 * so a derived set (build-test-kctls.ts) rebuilds only the sources it changed.
 */
function sameBuild(from: ComponentSet, to: ComponentSet, c: ComponentPin): boolean {
  const pinOf = (set: ComponentSet) => {
    const comp = set.manifest.components.find((x) => x.name === c.name);
    const pin = comp && set.manifest.sources[comp.source];
    if (!comp || !pin) return undefined;
    // A multi-call binary is made of its main file too: by content, as the cache key has it.
    const main = multiCallMain(pin);
    const mainHash = main && existsSync(main) ? createHash('sha256').update(readFileSync(main)).digest('hex') : '';
    return JSON.stringify([comp.source, comp.package, comp.dir, pin, mainHash, set.manifest.platform]);
  };
  return pinOf(from) !== undefined && pinOf(from) === pinOf(to);
}

/** The other cached sets that say what they were built from (manifest.json beside their lock). */
async function cachedSets(b: Build): Promise<{ set: ComponentSet; built: BuiltComponents }[]> {
  const root = join(cacheRoot(), 'components');
  const out: { set: ComponentSet; built: BuiltComponents }[] = [];
  for (const key of await readdir(root).catch(() => [] as string[])) {
    const dir = join(root, key);
    if (dir === b.outDir) continue;
    const manifest = await readFile(join(dir, MANIFEST_FILE), 'utf8').catch(() => undefined);
    const lock = await readLock(join(dir, 'payload.lock.json'));
    if (manifest && lock)
      out.push({ set: { key, manifest: JSON.parse(manifest) as Manifest }, built: { lock, binDir: join(dir, 'bin') } });
  }
  return out;
}

/**
 * Hard links to another cached set's build of each of `todo` made from the very same pins, so a
 * change of one pin rebuilds that source only; returns what is left to build.
 */
async function reuseCached(b: Build, todo: ComponentPin[], done: Map<string, LockEntry>): Promise<ComponentPin[]> {
  if (!todo.length) return todo;
  for (const { set, built } of await cachedSets(b)) {
    const same = todo.filter(
      (c) =>
        !done.has(c.name) &&
        sameBuild(set, b, c) &&
        built.lock.components.some((e) => e.name === c.name && existsSync(join(built.binDir, e.path))),
    );
    if (same.length) await reuseBuilt(b, built, same, done);
  }
  return todo.filter((c) => !done.has(c.name));
}

/**
 * Builds what `set` lacks into its cache directory (nothing when complete). With `reuse`, the
 * components that set built from the same pins are taken from its cache (built first if need be)
 * instead of being built again.
 */
export async function buildComponents(set: ComponentSet, reuse?: ComponentSet): Promise<BuiltComponents> {
  const b = buildOf(set);
  const binDir = join(b.outDir, 'bin');
  const complete = async () => {
    const done = await builtEntries(b);
    return set.manifest.components.every((c) => done.has(c.name)) ? done : null;
  };
  const ready = await complete();
  if (ready) {
    await describeSet(b);
    process.stdout.write(`components: all ${set.manifest.components.length} up to date in ${b.outDir}\n`);
    return { lock: lockOf(b, ready), binDir };
  }
  return withBuildLock(b, async () => {
    // Another build may have finished what this one waited for.
    const done = (await complete()) ?? (await builtEntries(b));
    const todo = set.manifest.components.filter((c) => !done.has(c.name));
    const shared = reuse ? todo.filter((c) => sameBuild(reuse, set, c)) : [];
    if (reuse && shared.length) await reuseBuilt(b, await buildComponents(reuse), shared, done);
    const rest = await reuseCached(
      b,
      todo.filter((c) => !done.has(c.name)),
      done,
    );
    await buildMissing(b, rest, done);
    return { lock: await writeLock(b, done), binDir };
  });
}

/** One build of a set at a time (two `npm test` runs at once): the second waits, then finds it done. */
function withBuildLock<T>(b: Build, fn: () => Promise<T>): Promise<T> {
  return withDirLock(b.outDir, 'components', 3600, fn);
}

/** Holds `dir`'s build lock while `fn` runs; another holder is waited for, up to `waitS` seconds. */
export async function withDirLock<T>(dir: string, what: string, waitS: number, fn: () => Promise<T>): Promise<T> {
  await mkdir(dir, { recursive: true });
  const options = { lockfilePath: join(dir, '.build.lock'), stale: 30_000, update: 5_000 };
  const release = await lockfile.lock(dir, options).catch(async (err: unknown) => {
    if (errnoOf(err) !== 'ELOCKED') throw err;
    process.stdout.write(`${what}: waiting for another build of ${dir}\n`);
    return lockfile.lock(dir, {
      ...options,
      retries: { retries: waitS, factor: 1, minTimeout: 1000, maxTimeout: 1000 },
    });
  });
  try {
    return await fn();
  } finally {
    await release();
  }
}

/** Hard links to `from`'s files for `components`, their lock entries added to `done`. */
async function reuseBuilt(
  b: Build,
  from: BuiltComponents,
  components: ComponentPin[],
  done: Map<string, LockEntry>,
): Promise<void> {
  for (const c of components) {
    const entry = from.lock.components.find((e) => e.name === c.name)!;
    await linkOrCopy(join(from.binDir, entry.path), join(b.outDir, 'bin', entry.path));
    done.set(c.name, entry);
  }
  await writeLock(b, done);
  process.stdout.write(`components: ${components.length} taken from ${from.binDir} (same pins)\n`);
}

/** Builds `todo` from source, each one's lock entry added to `done` (and to the lock file at once). */
async function buildMissing(b: Build, todo: ComponentPin[], done: Map<string, LockEntry>): Promise<void> {
  if (todo.length === 0) return;
  const { manifest } = b;
  if (todo.some((c) => manifest.sources[c.source]?.cgo)) await ensureDebianPackages(['libseccomp-dev', 'pkg-config']);
  const bar = progress(todo.length, 'components');
  const prepared = new Map<string, PreparedSource>();
  for (const c of todo) {
    const pin = manifest.sources[c.source]!;
    bar.step(`${c.name} ${pin.version}`);
    if (!prepared.has(c.source)) prepared.set(c.source, await prepareSource(c.source, pin));
    const path = await buildComponent(b, c, pin, prepared.get(c.source)!);
    await checkVersion(c, path);
    done.set(c.name, await lockEntry(manifest, c, path));
    await writeLock(b, done); // partial progress survives an interrupted build
  }
  bar.done();
}

/** The lock of what is done, in the manifest's order (the order dist/kctl's payload takes). */
function lockOf(b: Build, done: Map<string, LockEntry>): PayloadLock {
  const components = b.manifest.components.flatMap((c) => done.get(c.name) ?? []);
  return { key: b.key, platform: b.manifest.platform, components };
}

/** The pins a set was built from, beside its lock: other sets take what they share with it (reuseCached). */
const MANIFEST_FILE = 'manifest.json';

async function describeSet(b: Build): Promise<void> {
  const path = join(b.outDir, MANIFEST_FILE);
  if (existsSync(path)) return;
  await writeFile(`${path}.tmp`, JSON.stringify(b.manifest, null, 2) + '\n');
  await rename(`${path}.tmp`, path);
}

async function writeLock(b: Build, done: Map<string, LockEntry>): Promise<PayloadLock> {
  const lock = lockOf(b, done);
  await mkdir(b.outDir, { recursive: true });
  await describeSet(b);
  await writeFile(`${b.lockPath}.tmp`, JSON.stringify(lock, null, 2) + '\n');
  await rename(`${b.lockPath}.tmp`, b.lockPath);
  return lock;
}

/** The official release downloads of `set` into its cache directory. */
export async function downloadComponentSet(set: ComponentSet): Promise<BuiltComponents> {
  const b = buildOf(set);
  const binDir = join(b.outDir, 'bin');
  const entries = await downloadComponents(set.manifest, binDir, (c, p) => lockEntry(set.manifest, c, p), checkVersion);
  return { lock: await writeLock(b, new Map(entries.map((e) => [e.name, e]))), binDir };
}

async function main(): Promise<void> {
  const set = loadManifest();
  if (process.argv.includes('--download')) await downloadComponentSet(set);
  else await buildComponents(set);
  process.stdout.write(`${join(componentsDir(set.key), 'payload.lock.json')}\n`);
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  main().catch((err: unknown) => {
    process.stderr.write(`components: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
