// The two fields the front door routes by, read from a TLS ClientHello without terminating TLS:
// the server name (SNI) and the ALPN protocols. Written by hand because it is the only part of a
// handshake kctl reads and Node's tls module cannot look without taking the connection over; the
// npm packages that do it are unmaintained and stop at the first record.
//
// A ClientHello may come in several TLS records (RFC 8446 5.1 allows fragmenting a handshake
// message), and a hybrid post-quantum key share makes it 1.2-1.8 KB: the handshake bytes of
// consecutive handshake records are joined until the ClientHello's own length is there.

/** The most a ClientHello may take (record headers included) before the front door gives up. */
export const MAX_HELLO_BYTES = 16 * 1024 + 5 * 4;

export type HelloRead =
  { kind: 'more' } | { kind: 'hello'; serverName?: string; alpn: string[] } | { kind: 'bad'; reason: string };

const RECORD_HANDSHAKE = 0x16;
const HANDSHAKE_CLIENT_HELLO = 1;
const EXT_SERVER_NAME = 0;
const EXT_ALPN = 16;
const SNI_HOST_NAME = 0;

/** Reads what has arrived so far, all at once: `more` until the whole ClientHello is there. */
export function readClientHello(buf: Buffer): HelloRead {
  return new ClientHelloReader().push(buf);
}

/**
 * Reads a ClientHello as its bytes arrive, each byte looked at once: a record's header when it is
 * whole, its body when it is whole, the ClientHello once all its handshake bytes are there. A
 * client that sends one byte per segment, or one-byte records, costs work in proportion to what it
 * sent, not to its square.
 */
export class ClientHelloReader {
  /** Bytes of a record not yet whole (its header included). */
  private partial: Buffer[] = [];
  private partialBytes = 0;
  /** The handshake bytes of whole records, joined once at the end. */
  private readonly parts: Buffer[] = [];
  private handshakeBytes = 0;
  private helloLen: number | undefined;
  private received = 0;
  private result: HelloRead | undefined;

  /** What has arrived next; `more` until the ClientHello is whole (or found bad), then that for good. */
  push(chunk: Buffer): HelloRead {
    if (this.result) return this.result;
    if (this.received === 0 && chunk.length > 0 && chunk[0] !== RECORD_HANDSHAKE)
      return (this.result = { kind: 'bad', reason: 'not a TLS handshake' });
    this.received += chunk.length;
    this.partial.push(chunk);
    this.partialBytes += chunk.length;
    while (this.partialBytes >= 5) {
      const head = this.peek(5);
      if (head[0] !== RECORD_HANDSHAKE)
        return (this.result = { kind: 'bad', reason: 'a non-handshake record inside the ClientHello' });
      if (head[1] !== 3) return (this.result = { kind: 'bad', reason: 'not a TLS record version' });
      const len = head.readUInt16BE(3);
      if (len === 0) return (this.result = { kind: 'bad', reason: 'an empty handshake record' });
      if (this.partialBytes < 5 + len) break;
      const record = this.take(5 + len);
      this.parts.push(record.subarray(5));
      this.handshakeBytes += len;
      if (this.helloLen === undefined && this.handshakeBytes >= 4) {
        const start = Buffer.concat(this.parts, 4);
        if (start[0] !== HANDSHAKE_CLIENT_HELLO)
          return (this.result = { kind: 'bad', reason: 'the first handshake message is not a ClientHello' });
        this.helloLen = start.readUIntBE(1, 3);
        if (this.helloLen + 4 > MAX_HELLO_BYTES)
          return (this.result = { kind: 'bad', reason: `a ClientHello of ${this.helloLen} bytes` });
      }
      if (this.helloLen !== undefined && this.handshakeBytes >= this.helloLen + 4)
        return (this.result = parseHello(
          Buffer.concat(this.parts, this.handshakeBytes).subarray(4, 4 + this.helloLen),
        ));
    }
    if (this.received >= MAX_HELLO_BYTES)
      return (this.result = { kind: 'bad', reason: `no whole ClientHello in ${this.received} bytes` });
    return { kind: 'more' };
  }

  /** The first n bytes of the partial record (joined only when they span chunks; n is 5 here). */
  private peek(n: number): Buffer {
    const first = this.partial[0]!;
    if (first.length >= n) return first;
    return Buffer.concat(this.partial, Math.min(this.partialBytes, Math.max(n, 5)));
  }

  /** Takes the first n bytes of the partial data as one buffer. */
  private take(n: number): Buffer {
    const joined = this.partial.length === 1 ? this.partial[0]! : Buffer.concat(this.partial, this.partialBytes);
    const rest = joined.subarray(n);
    this.partial = rest.length ? [rest] : [];
    this.partialBytes = rest.length;
    return joined.subarray(0, n);
  }
}

/** A reader over the ClientHello body that throws on any length running past its end. */
class Cursor {
  private at = 0;
  constructor(private readonly b: Buffer) {}
  get left(): number {
    return this.b.length - this.at;
  }
  skip(n: number): void {
    if (n > this.left) throw new RangeError('truncated');
    this.at += n;
  }
  u8(): number {
    this.skip(1);
    return this.b[this.at - 1]!;
  }
  u16(): number {
    this.skip(2);
    return this.b.readUInt16BE(this.at - 2);
  }
  bytes(n: number): Buffer {
    this.skip(n);
    return this.b.subarray(this.at - n, this.at);
  }
}

function parseHello(body: Buffer): HelloRead {
  try {
    const c = new Cursor(body);
    c.skip(2 + 32); // legacy_version, random
    c.skip(c.u8()); // legacy_session_id
    c.skip(c.u16()); // cipher_suites
    c.skip(c.u8()); // legacy_compression_methods
    if (c.left === 0) return { kind: 'hello', alpn: [] }; // no extensions at all (TLS 1.2 and older may omit them)
    const ext = new Cursor(c.bytes(c.u16()));
    let serverName: string | undefined;
    let alpn: string[] = [];
    const seen = new Set<number>();
    while (ext.left > 0) {
      const type = ext.u16();
      const data = new Cursor(ext.bytes(ext.u16()));
      if (seen.has(type)) return { kind: 'bad', reason: `extension ${type} twice` };
      seen.add(type);
      if (type === EXT_SERVER_NAME) serverName = readServerName(new Cursor(data.bytes(data.u16())));
      else if (type === EXT_ALPN) alpn = readAlpn(new Cursor(data.bytes(data.u16())));
    }
    return { kind: 'hello', serverName, alpn };
  } catch (err) {
    return { kind: 'bad', reason: err instanceof BadName ? err.message : 'a ClientHello whose lengths do not add up' };
  }
}

class BadName extends Error {}

function readServerName(list: Cursor): string | undefined {
  let name: string | undefined;
  while (list.left > 0) {
    const type = list.u8();
    const value = list.bytes(list.u16());
    if (type !== SNI_HOST_NAME) continue;
    if (name !== undefined) throw new BadName('two host names in the server name extension');
    // RFC 6066: ASCII, no trailing dot; names are compared without case.
    if (value.length === 0 || value.length > 253 || !/^[A-Za-z0-9.-]+$/.test(value.toString('latin1')))
      throw new BadName('a server name that is not a DNS name');
    name = value.toString('latin1').toLowerCase();
  }
  return name;
}

function readAlpn(list: Cursor): string[] {
  const out: string[] = [];
  while (list.left > 0) out.push(list.bytes(list.u8()).toString('latin1'));
  return out;
}
