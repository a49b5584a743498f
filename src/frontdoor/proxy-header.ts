// PROXY protocol v2 (HAProxy's binary header), the way the front door hands a connection to one of
// kctl's own listeners on the same host: the header says who the client is (the konnectivity
// server's pre-authentication bounds and the join endpoint's failed-join limiter count per source
// address, and behind the door every connection would otherwise come from the host itself), and a
// TLV of kctl's carries the key the cluster put in its registration, so no other local process can
// claim an address. Written by hand: the npm codecs leave TLVs out of the header's length, and the
// part kctl needs is one fixed layout.
import { ipBytes, ipFromBytes } from '../base/addresses.ts';

/** The 12 bytes every v2 header starts with. */
const SIGNATURE = Buffer.from('0d0a0d0a000d0a515549540a', 'hex');
/** Version 2, command PROXY. */
const VERSION_PROXY = 0x21;
const TCP4 = 0x11;
const TCP6 = 0x21;
/** The first type the spec leaves to applications (PP2_TYPE_MIN_CUSTOM): the registration's key. */
export const KEY_TLV = 0xe0;
/** A header kctl writes is at most this long (IPv6 addresses and a 32-byte key); anything longer is not one. */
export const MAX_PROXY_HEADER_BYTES = 16 + 36 + 3 + 64;

export interface Endpoint {
  address: string;
  port: number;
}

export type ProxyHeaderRead =
  | { kind: 'more' }
  | { kind: 'bad'; reason: string }
  | { kind: 'header'; source: Endpoint; key: Buffer | undefined; length: number };

/** An IPv4-mapped IPv6 address (a dual-stack socket's view of an IPv4 client) as plain IPv4. */
export function plainAddress(address: string): string {
  return address.startsWith('::ffff:') && address.includes('.') ? address.slice(7) : address;
}

/**
 * The header for a connection from `source` that arrived at `destination`, with `key` in kctl's
 * TLV. Both ends are written in the source's family (a destination of the other family as the
 * unspecified address: nobody reads it).
 */
export function proxyHeader(source: Endpoint, destination: Endpoint, key: Buffer): Buffer {
  const srcBytes = ipBytes(plainAddress(source.address));
  if (!srcBytes) throw new Error(`not an IP address: ${source.address}`);
  const family = srcBytes.length === 4 ? TCP4 : TCP6;
  const dst = ipBytes(plainAddress(destination.address));
  const dstBytes = dst?.length === srcBytes.length ? dst : Buffer.alloc(srcBytes.length);
  const ports = Buffer.alloc(4);
  ports.writeUInt16BE(source.port, 0);
  ports.writeUInt16BE(destination.port, 2);
  const tlv = Buffer.alloc(3);
  tlv[0] = KEY_TLV;
  tlv.writeUInt16BE(key.length, 1);
  const body = Buffer.concat([srcBytes, dstBytes, ports, tlv, key]);
  const head = Buffer.alloc(4);
  head[0] = VERSION_PROXY;
  head[1] = family;
  head.writeUInt16BE(body.length, 2);
  return Buffer.concat([SIGNATURE, head, body]);
}

/** Reads the header at the start of what has arrived so far: `more` until it is whole. */
export function readProxyHeader(buf: Buffer): ProxyHeaderRead {
  const sig = Math.min(buf.length, SIGNATURE.length);
  if (!buf.subarray(0, sig).equals(SIGNATURE.subarray(0, sig))) return { kind: 'bad', reason: 'no PROXY v2 signature' };
  if (buf.length < 16) return { kind: 'more' };
  if (buf[12] !== VERSION_PROXY) return { kind: 'bad', reason: 'not a PROXY v2 header with command PROXY' };
  const family = buf[13];
  const addrLen = family === TCP4 ? 12 : family === TCP6 ? 36 : undefined;
  if (addrLen === undefined) return { kind: 'bad', reason: 'not a TCP over IPv4 or IPv6 header' };
  const length = 16 + buf.readUInt16BE(14);
  if (length > MAX_PROXY_HEADER_BYTES || length < 16 + addrLen)
    return { kind: 'bad', reason: `a header of ${length} bytes` };
  if (buf.length < length) return { kind: 'more' };
  const ipLen = (addrLen - 4) / 2;
  const address = ipFromBytes(buf.subarray(16, 16 + ipLen));
  const port = buf.readUInt16BE(16 + 2 * ipLen);
  let key: Buffer | undefined;
  for (let at = 16 + addrLen; at < length;) {
    if (at + 3 > length) return { kind: 'bad', reason: 'a TLV cut short' };
    const type = buf[at]!;
    const len = buf.readUInt16BE(at + 1);
    if (at + 3 + len > length) return { kind: 'bad', reason: 'a TLV longer than the header' };
    if (type === KEY_TLV) key = buf.subarray(at + 3, at + 3 + len);
    at += 3 + len;
  }
  return { kind: 'header', source: { address, port }, key, length };
}
