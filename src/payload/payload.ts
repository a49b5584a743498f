// Where the component binaries come from at run time: appended to the kctl executable
// (the shipped single file), or a component directory with its payload.lock.json (a dev
// checkout running under tsx, or tests).
//
// Embedded layout, after the Node single-executable image:
//   [component bytes ...][index JSON][trailer: "KCTLPAY1" | u64 LE index offset | u64 LE index length]
// The ELF loader ignores trailing bytes, so appending keeps the executable valid. Component
// binaries are stored zstd-compressed (an entry's `stored`); image bundles, already compressed
// layers, as they are. The index's sha256 and size are always those of the file as staged.
import { createReadStream, existsSync, readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { createZstdDecompress } from 'node:zlib';
import { BUNDLED_IMAGES } from './images.ts';
import { cacheRoot, isStagedBinary, loadManifest, manifestPath, type LockEntry, type PayloadLock, type Role } from './manifest.ts';

export const TRAILER_MAGIC = 'KCTLPAY1';
export const TRAILER_SIZE = 24;

export interface PayloadEntry extends LockEntry {
  /** Byte offset inside the embedded payload file; absent for directory payloads. */
  offset?: number;
  /** How the bytes lie in the executable when not as they are staged: `size` bytes of zstd. */
  stored?: { codec: 'zstd'; size: number };
  /** Directory payloads: an absolute source path, when the file lives outside the bin dir (images). */
  source?: string;
}

export interface PayloadIndex {
  kctl: string;
  platform: string;
  components: PayloadEntry[];
  /** Image bundles (OCI tarballs) for workers; path is the file name under <data-dir>/images. */
  images?: PayloadEntry[];
}

export interface Payload {
  readonly index: PayloadIndex;
  readonly origin: string;
  open(entry: PayloadEntry): Readable;
  forRoles(roles: Role[]): PayloadEntry[];
}

function select(index: PayloadIndex, roles: Role[]): PayloadEntry[] {
  return index.components.filter((c) => c.roles.some((r) => roles.includes(r)));
}

export class EmbeddedPayload implements Payload {
  constructor(
    readonly origin: string,
    readonly index: PayloadIndex,
  ) {}

  open(entry: PayloadEntry): Readable {
    if (entry.offset === undefined) throw new Error(`payload entry ${entry.name} has no offset`);
    const length = entry.stored?.size ?? entry.size;
    if (length === 0) return createReadStream(this.origin, { start: 1, end: 0 });
    const raw = createReadStream(this.origin, { start: entry.offset, end: entry.offset + length - 1 });
    if (!entry.stored) return raw;
    if (entry.stored.codec !== 'zstd')
      throw new Error(`payload entry ${entry.name} is stored as ${String(entry.stored.codec)}, which this kctl cannot read`);
    const inflate = createZstdDecompress();
    raw.on('error', (err) => inflate.destroy(err));
    return raw.pipe(inflate);
  }

  forRoles(roles: Role[]): PayloadEntry[] {
    return select(this.index, roles);
  }

  /** Bytes before the payload: the executable as it was built, Node and kctl's code. */
  programSize(): number {
    const offsets = [...this.index.components, ...(this.index.images ?? [])].map((e) => e.offset ?? Infinity);
    const start = Math.min(...offsets);
    if (!Number.isFinite(start)) throw new Error(`${this.origin}: its payload index has no offsets; reinstall kctl`);
    return start;
  }
}

export class DirectoryPayload implements Payload {
  constructor(
    readonly origin: string,
    readonly index: PayloadIndex,
  ) {}

  open(entry: PayloadEntry): Readable {
    return createReadStream(entry.source ?? join(this.origin, entry.path));
  }

  forRoles(roles: Role[]): PayloadEntry[] {
    return select(this.index, roles);
  }
}

/** Reads the trailer of an executable; null when the file carries no payload. */
export async function readEmbeddedPayload(file: string): Promise<EmbeddedPayload | null> {
  const fh = await open(file, 'r');
  try {
    const { size } = await fh.stat();
    if (size < TRAILER_SIZE) return null;
    const trailer = Buffer.alloc(TRAILER_SIZE);
    await fh.read(trailer, 0, TRAILER_SIZE, size - TRAILER_SIZE);
    if (trailer.subarray(0, 8).toString('latin1') !== TRAILER_MAGIC) return null;
    const indexOffset = Number(trailer.readBigUInt64LE(8));
    const indexLength = Number(trailer.readBigUInt64LE(16));
    if (indexOffset + indexLength + TRAILER_SIZE !== size)
      throw new Error(`${file}: payload trailer is inconsistent; the executable is damaged, reinstall kctl`);
    const buf = Buffer.alloc(indexLength);
    await fh.read(buf, 0, indexLength, indexOffset);
    return new EmbeddedPayload(file, JSON.parse(buf.toString('utf8')) as PayloadIndex);
  } finally {
    await fh.close();
  }
}

export function directoryPayload(binDir: string, lock: PayloadLock, kctlVersion: string, images: PayloadEntry[] = []): DirectoryPayload {
  return new DirectoryPayload(binDir, {
    kctl: kctlVersion,
    platform: lock.platform,
    components: lock.components.filter(isStagedBinary),
    images,
  });
}

/** Image bundles built by assets/build-images.ts into <cache>/images, described as payload entries. */
export function cachedImageEntries(dir: string, files: readonly { name: string; file: string }[]): PayloadEntry[] {
  const out: PayloadEntry[] = [];
  for (const f of files) {
    const source = join(dir, f.file);
    if (!existsSync(source)) continue;
    const bytes = readFileSync(source);
    out.push({
      name: f.name,
      version: f.name.split(':').pop() ?? '',
      sha256: createHash('sha256').update(bytes).digest('hex'),
      size: bytes.length,
      path: f.file,
      roles: ['worker'],
      source,
    });
  }
  return out;
}

/** The build cache for this checkout's manifest (dev runs and tests). */
export function cachedPayload(kctlVersion: string): DirectoryPayload | null {
  if (!existsSync(manifestPath())) return null;
  const { key } = loadManifest();
  const dir = join(cacheRoot(), 'components', key);
  const lockFile = join(dir, 'payload.lock.json');
  if (!existsSync(lockFile)) return null;
  return directoryPayload(
    join(dir, 'bin'),
    JSON.parse(readFileSync(lockFile, 'utf8')) as PayloadLock,
    kctlVersion,
    cachedImageEntries(join(cacheRoot(), 'images'), BUNDLED_IMAGES),
  );
}

/** The payload this kctl runs with: embedded in the executable, else the dev build cache. */
export async function findPayload(kctlVersion: string): Promise<Payload> {
  const embedded = await readEmbeddedPayload(process.execPath).catch((err: Error) => {
    if ((err as NodeJS.ErrnoException).code) return null;
    throw err;
  });
  if (embedded) return embedded;
  const cached = cachedPayload(kctlVersion);
  if (cached) return cached;
  throw new Error('no component payload: this kctl was not built with `npm run build`, and no components are cached; run `npm run components`');
}
