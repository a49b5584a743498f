// Where the component binaries come from at run time: appended to the kctl executable
// (the shipped single file), or a component directory with its payload.lock.json (a dev
// checkout running under tsx, or tests).
//
// Embedded layout of dist/kctl:
//   [launcher][runtime, zstd][component bytes ...][index JSON][trailer]
//   trailer: "KCTLPAY2" | u64 LE index offset | u64 LE index length
//            | u64 LE runtime offset | u64 LE runtime stored length | u64 LE runtime size | runtime sha256 (32 bytes)
// The launcher (assets/launcher) is a small static program that unpacks the runtime (the Node
// single-executable application with kctl's code) once and execs it, naming this file in
// KCTL_EXECUTABLE. The ELF loader ignores trailing bytes, so appending keeps the executable valid.
// Component binaries are stored zstd-compressed (an entry's `stored`); image bundles, already
// compressed layers, as they are. The index's sha256 and size are always those of the file as staged.
import { createReadStream, existsSync, readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { createZstdDecompress } from 'node:zlib';
import { kctlExecutable } from '../base/executable.ts';
import { KCTL_VERSION, type Release } from '../base/version.ts';
import { BUNDLED_IMAGES } from './images.ts';
import {
  cacheRoot,
  componentsDir,
  isStagedBinary,
  loadManifest,
  manifestPath,
  type LockEntry,
  type PayloadLock,
  type Role,
} from './manifest.ts';
import { errnoOf } from '../base/errors.ts';

export const TRAILER_MAGIC = 'KCTLPAY2';
export const TRAILER_SIZE = 80;
/** The name the runtime goes by as a payload entry (it is not staged; the launcher unpacks it). */
export const RUNTIME_ENTRY = 'kctl-runtime';

export interface Trailer {
  indexOffset: number;
  indexLength: number;
  /** The compressed runtime the launcher unpacks; absent in payloads built without a launcher (tests). */
  runtime?: { offset: number; stored: number; size: number; sha256: string };
}

export function encodeTrailer(t: Trailer): Buffer {
  const out = Buffer.alloc(TRAILER_SIZE);
  out.write(TRAILER_MAGIC, 0, 'latin1');
  out.writeBigUInt64LE(BigInt(t.indexOffset), 8);
  out.writeBigUInt64LE(BigInt(t.indexLength), 16);
  if (t.runtime) {
    out.writeBigUInt64LE(BigInt(t.runtime.offset), 24);
    out.writeBigUInt64LE(BigInt(t.runtime.stored), 32);
    out.writeBigUInt64LE(BigInt(t.runtime.size), 40);
    Buffer.from(t.runtime.sha256, 'hex').copy(out, 48);
  }
  return out;
}

/** The trailer in `raw`, null when `raw` is not one (a file that carries no payload). */
export function decodeTrailer(raw: Buffer): Trailer | null {
  if (raw.length !== TRAILER_SIZE || raw.subarray(0, 8).toString('latin1') !== TRAILER_MAGIC) return null;
  const num = (at: number) => Number(raw.readBigUInt64LE(at));
  const stored = num(32);
  return {
    indexOffset: num(8),
    indexLength: num(16),
    runtime: stored
      ? { offset: num(24), stored, size: num(40), sha256: raw.subarray(48, 80).toString('hex') }
      : undefined,
  };
}

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
  /** The runtime as a payload entry (zstd-stored), when this executable has a launcher. */
  readonly runtime?: PayloadEntry;

  constructor(
    readonly origin: string,
    readonly index: PayloadIndex,
    runtime?: Trailer['runtime'],
  ) {
    if (runtime)
      this.runtime = {
        name: RUNTIME_ENTRY,
        version: index.kctl,
        sha256: runtime.sha256,
        size: runtime.size,
        path: RUNTIME_ENTRY,
        roles: [],
        offset: runtime.offset,
        stored: { codec: 'zstd', size: runtime.stored },
      };
  }

  open(entry: PayloadEntry): Readable {
    if (entry.offset === undefined) throw new Error(`payload entry ${entry.name} has no offset`);
    const length = entry.stored?.size ?? entry.size;
    if (length === 0) return createReadStream(this.origin, { start: 1, end: 0 });
    const raw = createReadStream(this.origin, { start: entry.offset, end: entry.offset + length - 1 });
    if (!entry.stored) return raw;
    if (entry.stored.codec !== 'zstd')
      throw new Error(
        `payload entry ${entry.name} is stored as ${String(entry.stored.codec)}, which this kctl cannot read`,
      );
    const inflate = createZstdDecompress();
    raw.on('error', (err) => inflate.destroy(err));
    return raw.pipe(inflate);
  }

  forRoles(roles: Role[]): PayloadEntry[] {
    return select(this.index, roles);
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
    const raw = Buffer.alloc(TRAILER_SIZE);
    await fh.read(raw, 0, TRAILER_SIZE, size - TRAILER_SIZE);
    const trailer = decodeTrailer(raw);
    if (!trailer) return null;
    const { indexOffset, indexLength, runtime } = trailer;
    if (indexOffset + indexLength + TRAILER_SIZE !== size || (runtime && runtime.offset + runtime.stored > indexOffset))
      throw new Error(`${file}: payload trailer is inconsistent; the executable is damaged, reinstall kctl`);
    const buf = Buffer.alloc(indexLength);
    await fh.read(buf, 0, indexLength, indexOffset);
    return new EmbeddedPayload(file, JSON.parse(buf.toString('utf8')) as PayloadIndex, runtime);
  } finally {
    await fh.close();
  }
}

export function directoryPayload(
  binDir: string,
  lock: PayloadLock,
  kctlVersion: string,
  images: PayloadEntry[] = [],
): DirectoryPayload {
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
  const dir = componentsDir(key);
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
  const embedded = await readEmbeddedPayload(kctlExecutable() ?? process.execPath).catch((err: Error) => {
    if (errnoOf(err)) return null;
    throw err;
  });
  if (embedded) return embedded;
  const cached = cachedPayload(kctlVersion);
  if (cached) return cached;
  throw new Error(
    'no component payload: this kctl was not built with `npm run build`, and no components are cached; run `npm run components`',
  );
}

/** This kctl's release: its version and what its payload carries (what its leases and node annotations say it runs). */
export async function runningRelease(): Promise<Release> {
  return releaseOf((await findPayload(KCTL_VERSION)).index);
}

/** The release a payload index describes: kctl's version, and the Kubernetes and etcd versions it carries. */
export function releaseOf(index: PayloadIndex): Release {
  const version = (name: string): string => {
    const c = index.components.find((e) => e.name === name);
    if (!c) throw new Error(`the payload has no ${name}; rebuild kctl`);
    return c.version;
  };
  return { version: index.kctl, kubernetes: version('kube-apiserver'), etcd: version('etcd') };
}
