// Staging: copy component binaries from the payload into <data-dir>/bin. A file lands only
// after its sha256 matched the payload index, by atomic rename, while holding a lock on the
// bin dir so two starts cannot race. Unchanged files are left alone; damaged or foreign ones
// are replaced and the log says so. A file whose inode, size and ctime are those recorded when it
// was last hashed is not hashed again: any write to it (or a chmod, a touch) changes its ctime, and
// one host's bin dir, shared by many tenant control planes, is then checked once, not per start.
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { chmod, link, mkdir, readFile, rename, rm, stat } from 'node:fs/promises';
import { sha256OfFile, writeFileAtomic } from '../base/fs.ts';
import { basename, dirname, join } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import lockfile from 'proper-lockfile';
import type { Logger } from '../base/log.ts';
import { WORKER_IMAGE_NAMES } from './images.ts';
import type { Role } from './manifest.ts';
import type { Payload, PayloadEntry } from './payload.ts';

export interface StageResult {
  staged: string[];
  unchanged: string[];
  replaced: string[];
}

export class PayloadChecksumError extends Error {}

/**
 * sha256 of a staged file, read through one reused buffer: a start re-checks ~400 MB of
 * binaries, and a fresh Buffer per chunk would leave tens of MB of freed memory behind in a
 * process that then idles for months.
 */
export async function copyVerified(payload: Payload, entry: PayloadEntry, target: string, mode: number): Promise<void> {
  const tmp = join(dirname(target), `.${basename(target)}.${process.pid}.${Date.now()}.tmp`);
  const hash = createHash('sha256');
  const tap = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      hash.update(chunk);
      cb(null, chunk);
    },
  });
  let unreadable: Error | undefined;
  try {
    const source = payload.open(entry);
    source.once('error', (err) => (unreadable = err));
    await pipeline(source, tap, createWriteStream(tmp, { mode })).catch((err: Error) => {
      // Damaged compressed bytes fail the decompression before any checksum can.
      if (unreadable)
        throw new PayloadChecksumError(
          `payload component ${entry.name} is corrupt (${unreadable.message}); nothing was staged, reinstall or rebuild kctl`,
        );
      throw err;
    });
    const got = hash.digest('hex');
    if (got !== entry.sha256) {
      throw new PayloadChecksumError(
        `payload component ${entry.name} is corrupt (sha256 ${got.slice(0, 12)}…, expected ${entry.sha256.slice(0, 12)}…); nothing was staged, reinstall or rebuild kctl`,
      );
    }
    await chmod(tmp, mode);
    await rename(tmp, target);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}

/** `seed`: a directory staged before (the previous version's), whose unchanged binaries are linked, not decompressed. */
export async function stageComponents(
  payload: Payload,
  binDir: string,
  roles: Role[],
  log: Logger,
  seed?: string,
): Promise<StageResult> {
  return stageEntries(payload, payload.forRoles(roles), binDir, log, { manifest: true, mode: 0o755, seed });
}

/** Worker image bundles into <data-dir>/images, with the same checks. */
export async function stageImages(payload: Payload, imagesDir: string, log: Logger): Promise<StageResult> {
  return stageEntries(payload, workerImages(payload), imagesDir, log, { manifest: false, mode: 0o644 });
}

export const workerImages = (payload: Payload): PayloadEntry[] =>
  (payload.index.images ?? []).filter((e) => WORKER_IMAGE_NAMES.has(e.name));

/**
 * The named image bundles into `dir`, each checked against its sha256 as staging checks it. An
 * export for an operator to push or import elsewhere: only the tarballs, none of staging's
 * bookkeeping (stamps, lock).
 */
export async function saveImages(payload: Payload, names: string[], dir: string, log: Logger): Promise<PayloadEntry[]> {
  const all = payload.index.images ?? [];
  const unknown = names.filter((n) => !all.some((e) => e.name === n));
  if (unknown.length)
    throw new Error(`kctl carries no image ${unknown.join(', ')}; kctl airgap list-images names those it does`);
  const chosen = all.filter((e) => names.includes(e.name));
  await mkdir(dir, { recursive: true, mode: 0o755 });
  for (const entry of chosen) {
    await copyVerified(payload, entry, join(dir, entry.path), 0o644);
    log.info({ image: entry.name, file: join(dir, entry.path) }, 'image saved');
  }
  return chosen;
}

/** What a file's inode says about it; equal means untouched since it was last hashed. */
interface FileStamp {
  sha256: string;
  ino: number;
  size: number;
  ctimeMs: number;
}

const STAMPS_FILE = '.verified.json';

async function readStamps(dir: string): Promise<Record<string, FileStamp>> {
  try {
    const v = JSON.parse(await readFile(join(dir, STAMPS_FILE), 'utf8')) as unknown;
    return v !== null && typeof v === 'object' ? (v as Record<string, FileStamp>) : {};
  } catch {
    return {};
  }
}

async function stampOf(target: string, sha256: string): Promise<FileStamp | undefined> {
  const s = await stat(target).catch(() => undefined);
  return s && { sha256, ino: s.ino, size: s.size, ctimeMs: s.ctimeMs };
}

const sameStamp = (a: FileStamp | undefined, b: FileStamp | undefined): boolean =>
  !!a && !!b && a.sha256 === b.sha256 && a.ino === b.ino && a.size === b.size && a.ctimeMs === b.ctimeMs;

async function sameInode(a: string, b: string): Promise<boolean> {
  const [sa, sb] = await Promise.all([stat(a).catch(() => undefined), stat(b).catch(() => undefined)]);
  return !!sa && !!sb && sa.ino === sb.ino && sa.dev === sb.dev;
}

/** `target` becomes a hard link to `existing`, atomically (a tmp link renamed over it). */
async function linkOver(existing: string, target: string): Promise<void> {
  const tmp = join(dirname(target), `.${basename(target)}.${process.pid}.${Date.now()}.link`);
  await link(existing, tmp);
  await rename(tmp, target);
}

/** Every entry is in `dir`, untouched since it was last hashed: staging would read nothing but stamps. */
export async function alreadyStaged(entries: PayloadEntry[], dir: string): Promise<boolean> {
  const stamps = await readStamps(dir);
  for (const e of entries) if (!sameStamp(stamps[e.path], await stampOf(join(dir, e.path), e.sha256))) return false;
  return true;
}

async function stageEntries(
  payload: Payload,
  entries: PayloadEntry[],
  binDir: string,
  log: Logger,
  o: { manifest: boolean; mode: number; seed?: string },
): Promise<StageResult> {
  await mkdir(binDir, { recursive: true, mode: 0o755 });
  const release = await lockfile.lock(binDir, {
    lockfilePath: join(binDir, '.stage.lock'),
    stale: 30_000,
    update: 5_000,
    retries: { retries: 1200, factor: 1, minTimeout: 100, maxTimeout: 250 },
  });
  const result: StageResult = { staged: [], unchanged: [], replaced: [] };
  const buf = Buffer.allocUnsafe(1024 * 1024);
  const stamps = await readStamps(binDir);
  /** path -> sha256 of every entry found or made right; stamped once at the end. */
  const verified: Record<string, string> = {};
  /** sha256 -> a file in binDir known to hold those bytes. */
  const twins = new Map<string, string>();
  const classify = (entry: PayloadEntry, target: string, current: string | null): void => {
    if (current === entry.sha256) {
      result.unchanged.push(entry.name);
    } else if (current === null) {
      result.staged.push(entry.name);
      log.debug({ file: entry.path, version: entry.version }, 'staged component');
    } else {
      result.replaced.push(entry.name);
      log.warn(
        { file: target, found: current.slice(0, 12), expected: entry.sha256.slice(0, 12) },
        'replaced a corrupted or foreign component binary',
      );
    }
  };
  try {
    // Files stamped by earlier calls (another role's set) can be linked to, and are stamped
    // again at the end: a link made now changes their inode's ctime.
    const stillValid: string[] = [];
    for (const [path, stamp] of Object.entries(stamps)) {
      if (!sameStamp(stamp, await stampOf(join(binDir, path), stamp.sha256))) continue;
      stillValid.push(path);
      if (!twins.has(stamp.sha256)) twins.set(stamp.sha256, join(binDir, path));
    }
    // The previous version's files of the same bytes: linked, so an upgrade decompresses only
    // what changed. Their stamps there go stale (a link changes the inode's ctime), so a rollback
    // hashes them again, but decompresses nothing.
    if (o.seed !== undefined && o.seed !== binDir) {
      for (const [path, stamp] of Object.entries(await readStamps(o.seed))) {
        if (!twins.has(stamp.sha256) && sameStamp(stamp, await stampOf(join(o.seed, path), stamp.sha256)))
          twins.set(stamp.sha256, join(o.seed, path));
      }
    }
    for (const entry of entries) {
      const target = join(binDir, entry.path);
      await mkdir(dirname(target), { recursive: true });
      const recorded = stamps[entry.path];
      const twin = twins.get(entry.sha256);
      verified[entry.path] = entry.sha256;
      const linked = twin !== undefined && (await sameInode(twin, target));
      if (linked || (twin === undefined && sameStamp(recorded, await stampOf(target, entry.sha256)))) {
        // Already one inode with a file of these bytes, or untouched since it was last hashed.
        twins.set(entry.sha256, target);
        result.unchanged.push(entry.name);
        continue;
      }
      const current = await sha256OfFile(target, buf);
      if (twin !== undefined) {
        // The same bytes under another name (a multi-call binary): one inode, not another copy.
        await linkOver(twin, target);
        classify(entry, target, current);
        continue;
      }
      if (current === entry.sha256) {
        const mode = (await stat(target)).mode & 0o777;
        if (mode !== o.mode) await chmod(target, o.mode);
        twins.set(entry.sha256, target);
        result.unchanged.push(entry.name);
        continue;
      }
      await copyVerified(payload, entry, target, o.mode);
      twins.set(entry.sha256, target);
      classify(entry, target, current);
    }
    // Stamped once all links are made (a new link changes its inode's ctime), with the files
    // stamped by earlier calls into this dir (another role's set) that were still valid.
    const fresh: Record<string, FileStamp> = {};
    for (const path of stillValid) fresh[path] = (await stampOf(join(binDir, path), stamps[path]!.sha256))!;
    for (const [path, sha256] of Object.entries(verified)) fresh[path] = (await stampOf(join(binDir, path), sha256))!;
    // Stamps of other files stay as they were.
    await writeFileAtomic(join(binDir, STAMPS_FILE), JSON.stringify({ ...stamps, ...fresh }) + '\n', 0o644);
    if (o.manifest) {
      const manifest = entries.map(({ name, version, sha256, path }) => ({ name, version, sha256, path }));
      const manifestFile = join(binDir, 'manifest.json');
      await writeFileAtomic(
        manifestFile,
        JSON.stringify({ kctl: payload.index.kctl, components: manifest }, null, 2) + '\n',
        0o644,
      );
    }
    log.info(
      {
        staged: result.staged.length,
        replaced: result.replaced.length,
        unchanged: result.unchanged.length,
        dir: binDir,
      },
      'components staged',
    );
    return result;
  } finally {
    await release();
  }
}
