// The protobuf wire primitives the generated codec (gen/konnectivity.ts) is written against.
// Decoding is protobufjs's BufferReader (bounds-checked), with `bytes` fields read as views
// into the received buffer, never copies. Encoding is by hand because it must not copy a DATA payload
// more than once: the generated code sizes a message first, then writes it into one exact
// Buffer (protobufjs 8's growing Writer copies a payload up to three times).
// int64 values are decimal strings here: `random` uses all 63 bits, which a JS number cannot hold.
import protobuf from 'protobufjs/minimal.js';
import type { BufferReader } from 'protobufjs/minimal.js';

export type { BufferReader };

export function newReader(buf: Buffer): BufferReader {
  return new protobuf.BufferReader(buf);
}

/** An int64 as the reader returns it (a long.js Long). */
interface LongLike {
  low: number;
  high: number;
  toString(): string;
}

const TWO_32 = 0x1_0000_0000;

/** Decimal string of an int64 read off the wire, exact over all 64 bits. */
export function int64String(l: LongLike): string {
  // Below 2^53 plain arithmetic is exact and much cheaper than Long's division loop.
  if (l.high >= 0 && l.high < 0x20_0000) return String(l.high * TWO_32 + (l.low >>> 0));
  return l.toString();
}

/** A `bytes` field: a view into the received buffer, never a copy. */
export function bytes(r: BufferReader): Buffer {
  const len = r.uint32();
  const start = r.pos;
  if (start + len > r.len)
    throw new RangeError(
      `invalid protobuf message: a ${len}-byte field at offset ${start} runs past its end (${r.len})`,
    );
  r.pos = start + len;
  return Buffer.from(r.buf.buffer, r.buf.byteOffset + start, len);
}

/** Empty `bytes` default; shared, as nothing ever writes into a decoded payload. */
export const NO_BYTES: Buffer = Buffer.alloc(0);

/** `n` as an int64 that fits a JS number exactly, or null when it needs a bigint. */
function smallInt64(s: string): number | null {
  if (s.length > 15) return null;
  const n = Number(s);
  return n >= 0 && Number.isSafeInteger(n) ? n : null;
}

function bigInt64(s: string | number): bigint {
  return BigInt.asUintN(64, BigInt(s));
}

export function sizeVarint(n: number): number {
  let size = 1;
  while (n >= 128) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

function sizeBigVarint(v: bigint): number {
  let size = 1;
  while (v >= 128n) {
    v >>= 7n;
    size++;
  }
  return size;
}

/** Varint size of an int64 given as a decimal string. */
export function sizeInt64(s: string): number {
  const n = smallInt64(s);
  return n !== null ? sizeVarint(n) : sizeBigVarint(bigInt64(s));
}

/** Varint size of an int32 (negative values take ten bytes, as in every protobuf). */
export function sizeInt32(n: number): number {
  return n < 0 ? 10 : sizeVarint(n);
}

/** Length-prefixed size of a string field's value. */
export function sizeString(s: string): number {
  const len = Buffer.byteLength(s);
  return sizeVarint(len) + len;
}

export function sizeBytes(b: Uint8Array): number {
  return sizeVarint(b.length) + b.length;
}

/** Writes into one Buffer of the exact size the generated size functions computed. */
export class WireWriter {
  readonly buf: Buffer;
  pos = 0;

  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }

  /** A tag, a length or any non-negative number below 2^53. */
  varint(n: number): void {
    const buf = this.buf;
    while (n >= 128) {
      buf[this.pos++] = (n % 128) + 128;
      n = Math.floor(n / 128);
    }
    buf[this.pos++] = n;
  }

  private bigVarint(v: bigint): void {
    while (v >= 128n) {
      this.buf[this.pos++] = Number(v & 127n) | 128;
      v >>= 7n;
    }
    this.buf[this.pos++] = Number(v);
  }

  int64(s: string): void {
    const n = smallInt64(s);
    if (n !== null) this.varint(n);
    else this.bigVarint(bigInt64(s));
  }

  int32(n: number): void {
    if (n < 0) this.bigVarint(bigInt64(n));
    else this.varint(n);
  }

  string(s: string): void {
    const len = Buffer.byteLength(s);
    this.varint(len);
    this.pos += this.buf.write(s, this.pos, len, 'utf8');
  }

  /** The one copy of a payload: into the message buffer grpc-js sends. */
  bytes(b: Uint8Array): void {
    this.varint(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }

  /** The finished message; throws if the size pass and the write pass disagree (a generator bug). */
  finish(): Buffer {
    if (this.pos !== this.buf.length)
      throw new Error(`protobuf encoder wrote ${this.pos} bytes into a ${this.buf.length}-byte message`);
    return this.buf;
  }
}
