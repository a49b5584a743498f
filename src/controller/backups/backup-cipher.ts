// Encrypted backup archives (kctl-backup-<time>.tar.gz.enc): AES-256-GCM in fixed-size chunks,
// each sealed on its own, so an archive is written and read as a stream and any change is found:
//
//   header (68 bytes, authenticated with every chunk as additional data)
//     0   8  magic "KCTL-ENC"
//     8   1  format version (1)
//     9   4  plaintext bytes per chunk (uint32, big-endian; 65536)
//     13 32  salt (random per archive)
//     45  7  nonce prefix (random per archive)
//     52 16  key check: HKDF-SHA256(key, salt, "kctl backup key check v1"), tells a wrong key from damage
//   chunks: ciphertext || 16-byte GCM tag; every chunk holds exactly chunk-size bytes but the last
//     (0..chunk-size bytes). Chunk i's nonce: prefix (7) || i (uint32) || 1 if it is the last chunk else 0.
//   The chunk key is HKDF-SHA256(key, salt, "kctl backup aes-256-gcm v1"): a fresh key per archive.
//
// Counter and last-chunk flag in the nonce make a reordered, dropped, repeated or cut-off chunk
// fail its tag; the header as additional data makes an edited header fail every chunk.
//
// Key file: 32 random bytes in base64 on one line, mode 0600 (0400 will do), made by
// `kctl backup key create FILE` or `openssl rand -base64 32 > FILE; chmod 600 FILE`.
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import { open, readFile, stat, writeFile } from 'node:fs/promises';
import { Transform, type TransformCallback } from 'node:stream';
import { asError, errnoOf, UserError } from '../../base/errors.ts';

export const MAGIC = Buffer.from('KCTL-ENC');
const VERSION = 1;
const HEADER_SIZE = 68;
const TAG_SIZE = 16;
const KEY_SIZE = 32;
export const DEFAULT_CHUNK_SIZE = 64 * 1024;
/** The largest chunk a reader accepts: a header cannot make it buffer more than this. */
const MAX_CHUNK_SIZE = 16 * 1024 * 1024;

/** Why an encrypted archive cannot be read. */
export type OpenFailure = 'not-encrypted' | 'unsupported' | 'wrong-key' | 'damaged';

export class BackupCipherError extends Error {
  constructor(
    readonly kind: OpenFailure,
    message: string,
  ) {
    super(message);
  }
}

function derive(key: Buffer, salt: Buffer, info: string, length: number): Buffer {
  return Buffer.from(hkdfSync('sha256', key, salt, info, length));
}

function nonce(prefix: Buffer, index: number, last: boolean): Buffer {
  const n = Buffer.alloc(12);
  prefix.copy(n, 0);
  n.writeUInt32BE(index, 7);
  n[11] = last ? 1 : 0;
  return n;
}

interface ChunkState {
  header: Buffer;
  chunkKey: Buffer;
  prefix: Buffer;
  index: number;
}

/** Seals plaintext pushed in pieces of any size into the format above. */
export class Sealer {
  private readonly s: ChunkState;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private headerSent = false;

  constructor(
    key: Buffer,
    private readonly chunkSize = DEFAULT_CHUNK_SIZE,
  ) {
    const salt = randomBytes(32);
    const prefix = randomBytes(7);
    const header = Buffer.alloc(HEADER_SIZE);
    MAGIC.copy(header, 0);
    header[8] = VERSION;
    header.writeUInt32BE(chunkSize, 9);
    salt.copy(header, 13);
    prefix.copy(header, 45);
    derive(key, salt, 'kctl backup key check v1', 16).copy(header, 52);
    this.s = { header, chunkKey: derive(key, salt, 'kctl backup aes-256-gcm v1', KEY_SIZE), prefix, index: 0 };
  }

  /** The header (first time), then every full chunk that is surely not the last. */
  push(data: Buffer): Buffer[] {
    const out = this.headerOnce();
    this.pending.push(data);
    this.pendingBytes += data.length;
    // A full chunk is sealed only once a byte beyond it exists: the last chunk must carry the flag.
    while (this.pendingBytes > this.chunkSize) out.push(this.seal(this.take(this.chunkSize), false));
    return out;
  }

  /** The last chunk (possibly empty). */
  end(): Buffer[] {
    return [...this.headerOnce(), this.seal(this.take(this.pendingBytes), true)];
  }

  private headerOnce(): Buffer[] {
    if (this.headerSent) return [];
    this.headerSent = true;
    return [this.s.header];
  }

  private take(n: number): Buffer {
    const all = Buffer.concat(this.pending);
    this.pending = [all.subarray(n)];
    this.pendingBytes = all.length - n;
    return all.subarray(0, n);
  }

  private seal(plain: Buffer, last: boolean): Buffer {
    const c = createCipheriv('aes-256-gcm', this.s.chunkKey, nonce(this.s.prefix, this.s.index++, last));
    c.setAAD(this.s.header);
    const body = Buffer.concat([c.update(plain), c.final()]);
    return Buffer.concat([body, c.getAuthTag()]);
  }
}

/** Opens what a Sealer made, checking every chunk before handing its plaintext on. */
export class Opener {
  private s: ChunkState | undefined;
  private chunkSize = 0;
  private pending = Buffer.alloc(0);

  constructor(private readonly key: Buffer) {}

  push(data: Buffer): Buffer[] {
    this.pending = Buffer.concat([this.pending, data]);
    const out: Buffer[] = [];
    if (!this.s) {
      const n = Math.min(this.pending.length, MAGIC.length);
      if (!this.pending.subarray(0, n).equals(MAGIC.subarray(0, n))) throw notEncrypted();
      if (this.pending.length < HEADER_SIZE) return out;
      this.readHeader(this.pending.subarray(0, HEADER_SIZE));
      this.pending = this.pending.subarray(HEADER_SIZE);
    }
    while (this.pending.length > this.chunkSize + TAG_SIZE) {
      out.push(this.open(this.pending.subarray(0, this.chunkSize + TAG_SIZE), false));
      this.pending = this.pending.subarray(this.chunkSize + TAG_SIZE);
    }
    return out;
  }

  end(): Buffer[] {
    if (!this.s) throw this.pending.length < MAGIC.length ? notEncrypted() : damaged('it is cut off in its header');
    if (this.pending.length < TAG_SIZE) throw damaged('it is cut off');
    return [this.open(this.pending, true)];
  }

  private readHeader(header: Buffer): void {
    if (!header.subarray(0, MAGIC.length).equals(MAGIC)) throw notEncrypted();
    if (header[8] !== VERSION)
      throw new BackupCipherError(
        'unsupported',
        `it is encrypted in format version ${header[8]}, which this kctl does not read; use a newer kctl`,
      );
    const chunkSize = header.readUInt32BE(9);
    if (chunkSize < 1 || chunkSize > MAX_CHUNK_SIZE) throw damaged('its header is altered or damaged');
    const salt = header.subarray(13, 45);
    const check = derive(this.key, salt, 'kctl backup key check v1', 16);
    if (!timingSafeEqual(check, header.subarray(52, 68)))
      throw new BackupCipherError(
        'wrong-key',
        'the encryption key file does not match it (another key, or its header is altered)',
      );
    this.chunkSize = chunkSize;
    this.s = {
      header: Buffer.from(header),
      chunkKey: derive(this.key, salt, 'kctl backup aes-256-gcm v1', KEY_SIZE),
      prefix: Buffer.from(header.subarray(45, 52)),
      index: 0,
    };
  }

  private open(sealed: Buffer, last: boolean): Buffer {
    const s = this.s!;
    const at = s.index;
    const d = createDecipheriv('aes-256-gcm', s.chunkKey, nonce(s.prefix, s.index++, last));
    d.setAAD(s.header);
    d.setAuthTag(sealed.subarray(sealed.length - TAG_SIZE));
    const plain = d.update(sealed.subarray(0, sealed.length - TAG_SIZE));
    try {
      d.final();
    } catch {
      throw damaged(
        last
          ? `its last chunk (${at}) does not authenticate: altered, cut off or extended`
          : `chunk ${at} does not authenticate: altered`,
      );
    }
    return plain;
  }
}

const notEncrypted = () => new BackupCipherError('not-encrypted', 'it is not a kctl encrypted archive');
const damaged = (why: string) => new BackupCipherError('damaged', why);

/** A stream Transform around a Sealer or an Opener. */
export function cipherStream(c: Sealer | Opener): Transform {
  const run = (fn: () => Buffer[], push: (b: Buffer) => void, cb: TransformCallback) => {
    try {
      for (const b of fn()) push(b);
      cb();
    } catch (err) {
      cb(asError(err));
    }
  };
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      run(
        () => c.push(chunk),
        (b) => this.push(b),
        cb,
      );
    },
    flush(cb) {
      run(
        () => c.end(),
        (b) => this.push(b),
        cb,
      );
    },
  });
}

/** True when the file starts with the encrypted archive's magic. */
export async function isEncryptedArchive(file: string): Promise<boolean> {
  const fh = await open(file, 'r');
  try {
    const head = Buffer.alloc(MAGIC.length);
    const { bytesRead } = await fh.read(head, 0, MAGIC.length, 0);
    return bytesRead === MAGIC.length && head.equals(MAGIC);
  } finally {
    await fh.close();
  }
}

const KEY_HINT =
  'a backup key is 32 random bytes in base64 on one line, mode 0600: make one with kctl backup key create FILE';

/** The key in a key file; refuses (one line) a missing file, one others may read, or one that is not a key. */
export async function readBackupKey(file: string): Promise<Buffer> {
  const st = await stat(file).catch((err: unknown) => {
    throw new UserError(`encryption key file ${file} cannot be read (${errnoOf(err) ?? 'error'}); ${KEY_HINT}`);
  });
  if (!st.isFile()) throw new UserError(`encryption key file ${file} is not a file; ${KEY_HINT}`);
  if (st.mode & 0o077)
    throw new UserError(
      `encryption key file ${file} is open to others (mode ${(st.mode & 0o777).toString(8).padStart(4, '0')}); chmod 600 ${file}`,
    );
  const text = (await readFile(file, 'utf8')).trim();
  const key = /^[A-Za-z0-9+/]{43}=$/.test(text) ? Buffer.from(text, 'base64') : undefined;
  if (key?.length !== KEY_SIZE)
    throw new UserError(`encryption key file ${file} does not hold a backup key; ${KEY_HINT}`);
  return key;
}

/** Writes a new key file (0600); refuses to replace one. */
export async function createBackupKey(file: string): Promise<void> {
  await writeFile(file, randomBytes(KEY_SIZE).toString('base64') + '\n', { mode: 0o600, flag: 'wx' }).catch(
    (err: unknown) => {
      const code = errnoOf(err);
      throw new UserError(
        code === 'EEXIST'
          ? `${file} exists; a key is never replaced (archives made with it need it): choose another file name`
          : `cannot write ${file} (${code ?? 'error'})`,
      );
    },
  );
}
