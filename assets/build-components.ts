// `npm run components`: build the pinned component set from its Go modules (default), or
// take the official release downloads (`-- --download`). Output goes to a cache outside the
// checkout, keyed by assets/components.json, and ends with payload.lock.json (sha256 list).
import { execa } from 'execa';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { copyFile, cp, link, mkdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  cacheRoot,
  componentRelPath,
  componentVersion,
  loadManifest,
  multiCallMain,
  type ComponentPin,
  type LockEntry,
  type Manifest,
  type PayloadLock,
  type SourcePin,
} from '../src/payload/manifest.ts';
import { ensureDebianPackages } from './debian.ts';
import { downloadComponents } from './download-components.ts';
import { progress } from './progress.ts';
import { checkVersion } from '../src/payload/verify.ts';

const { manifest, key } = loadManifest();
const outDir = join(cacheRoot(), 'components', key);
const lockPath = join(outDir, 'payload.lock.json');

async function sha256File(path: string): Promise<string> {
  return createHash('sha256')
    .update(await readFile(path))
    .digest('hex');
}

interface PreparedSource {
  dir: string;
  time: string;
}

/** Go refuses `go install` on modules with in-repo replaces; copy the module and pin those to published versions. */
async function prepareSource(name: string, pin: SourcePin): Promise<PreparedSource> {
  const env = goEnv(pin);
  const dl = await execa('go', ['mod', 'download', '-json', `${pin.module}@${pin.version}`], { env, cwd: '/', reject: false });
  const info = JSON.parse(dl.stdout || '{}') as { Dir?: string; Time?: string; Error?: string };
  if (!info.Dir) throw new Error(`go mod download ${pin.module}@${pin.version} failed: ${info.Error ?? dl.stderr}`);
  const dir = join(cacheRoot(), 'src', `${name}@${pin.version}`);
  const marker = join(dir, '.kctl-prepared');
  if (existsSync(marker)) return { dir, time: info.Time ?? '' };
  await rm(dir, { recursive: true, force: true });
  await cp(info.Dir, dir, { recursive: true });
  await execa('chmod', ['-R', 'u+w', dir]);
  for (const stray of ['go.work', 'go.work.sum', 'vendor']) await rm(join(dir, stray), { recursive: true, force: true });
  const mod = JSON.parse((await execa('go', ['mod', 'edit', '-json'], { cwd: dir, env })).stdout) as {
    Require?: { Path: string; Version: string }[];
    Replace?: { Old: { Path: string }; New: { Path: string; Version?: string } }[];
  };
  const edits: string[] = [];
  for (const r of mod.Replace ?? []) {
    if (!r.New.Path.startsWith('./') && !r.New.Path.startsWith('../')) continue;
    edits.push(`-dropreplace=${r.Old.Path}`);
    const req = mod.Require?.find((q) => q.Path === r.Old.Path);
    if (req && req.Version === 'v0.0.0' && pin.stagingVersion) edits.push(`-require=${r.Old.Path}@${pin.stagingVersion}`);
  }
  if (edits.length) await execa('go', ['mod', 'edit', ...edits], { cwd: dir, env });
  await writeFile(marker, `${pin.module}@${pin.version}\n`);
  return { dir, time: info.Time ?? '' };
}

function goEnv(pin: SourcePin): Record<string, string> {
  const env: Record<string, string> = { GOFLAGS: '-mod=mod -buildvcs=false', GOWORK: 'off', CGO_ENABLED: pin.cgo ? '1' : '0' };
  if (pin.noSumDb) env.GONOSUMDB = pin.module;
  if (pin.cflags) env.CGO_CFLAGS = pin.cflags;
  return env;
}

async function goBuild(name: string, pin: SourcePin, src: PreparedSource, pkg: string, out: string): Promise<void> {
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
const multiCallBuilds = new Map<string, Promise<string>>();
function multiCallBinary(source: string, pin: SourcePin, src: PreparedSource, main: string): Promise<string> {
  let built = multiCallBuilds.get(source);
  if (!built) {
    built = (async () => {
      const out = join(outDir, 'bin', '.multicall', source);
      await mkdir(join(src.dir, 'cmd', 'kctl-multicall'), { recursive: true });
      await copyFile(main, join(src.dir, 'cmd', 'kctl-multicall', 'main.go'));
      await goBuild(`${source} (multi-call)`, pin, src, './cmd/kctl-multicall', out);
      return out;
    })();
    multiCallBuilds.set(source, built);
  }
  return built;
}

async function buildComponent(c: ComponentPin, pin: SourcePin, src: PreparedSource): Promise<string> {
  const out = join(outDir, 'bin', componentRelPath(c));
  const main = multiCallMain(pin);
  if (!main) {
    await goBuild(c.name, pin, src, c.package, out);
    return out;
  }
  // One binary, one hard link per component name (the name selects the component).
  const binary = await multiCallBinary(c.source, pin, src, main);
  await rm(out, { force: true });
  await link(binary, out);
  return out;
}

async function readLock(): Promise<PayloadLock | null> {
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

async function buildAll(): Promise<void> {
  const prev = await readLock();
  const entries: LockEntry[] = [];
  const todo = manifest.components.filter((c) => {
    const have = prev?.components.find((e) => e.name === c.name);
    return !(have && existsSync(join(outDir, 'bin', have.path)));
  });
  if (todo.length === 0) {
    process.stdout.write(`components: all ${manifest.components.length} up to date in ${outDir}\n`);
    return;
  }
  const needsCgo = todo.some((c) => manifest.sources[c.source]?.cgo);
  if (needsCgo) await ensureDebianPackages(['libseccomp-dev', 'pkg-config']);
  const bar = progress(todo.length, 'components');
  const prepared = new Map<string, PreparedSource>();
  for (const c of manifest.components) {
    const have = prev?.components.find((e) => e.name === c.name);
    if (have && !todo.includes(c)) {
      entries.push(have);
      continue;
    }
    const pin = manifest.sources[c.source]!;
    bar.step(`${c.name} ${pin.version}`);
    if (!prepared.has(c.source)) prepared.set(c.source, await prepareSource(c.source, pin));
    const out = await buildComponent(c, pin, prepared.get(c.source)!);
    await checkVersion(c, out);
    entries.push(await lockEntry(manifest, c, out));
    await writeLock(entries); // partial progress survives an interrupted build
  }
  bar.done();
}

async function writeLock(components: LockEntry[]): Promise<void> {
  const lock: PayloadLock = { key, platform: manifest.platform, components };
  await mkdir(outDir, { recursive: true });
  await writeFile(`${lockPath}.tmp`, JSON.stringify(lock, null, 2) + '\n');
  await rename(`${lockPath}.tmp`, lockPath);
}

async function main(): Promise<void> {
  const download = process.argv.includes('--download');
  if (download) {
    const entries = await downloadComponents(manifest, join(outDir, 'bin'), (c, p) => lockEntry(manifest, c, p), checkVersion);
    await writeLock(entries);
  } else {
    await buildAll();
  }
  process.stdout.write(`${lockPath}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`components: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
