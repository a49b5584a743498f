// Addresses as kctl spells them everywhere: one canonical form per IP (so string equality
// works), host:port with IPv6 in brackets, and addresses inside a CIDR.
import { BlockList, isIP, isIPv4, isIPv6 } from 'node:net';

/**
 * The one spelling of an IP address we compare with: IPv4 dotted quad, IPv6 as RFC 5952
 * (the WHATWG URL serializer does exactly that, so "0:0::1" and "::1" compare equal).
 * Null when `ip` is not an IP address.
 */
export function canonicalIp(ip: string): string | null {
  const bare = ip.replace(/%.*$/, ''); // link-local zone ids ("fe80::1%eth0") are not part of an address we compare
  switch (isIP(bare)) {
    case 4:
      return bare
        .split('.')
        .map((o) => String(Number(o)))
        .join('.');
    case 6:
      return new URL(`http://[${bare}]/`).hostname.slice(1, -1);
    default:
      return null;
  }
}

/** "host:port", IPv6 literals in brackets. */
export function joinHostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** "host:port" / "[v6]:port" -> parts (IPv6 canonical, names lowercase); null when malformed. */
export function splitHostPort(address: string): { host: string; port: number } | null {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(address);
  if (!m) return null;
  const port = Number(m[3]);
  if (port < 1 || port > 65535) return null;
  const host = m[1] !== undefined ? (canonicalIp(m[1]) ?? m[1].toLowerCase()) : (m[2] ?? '').toLowerCase();
  return { host, port };
}

/** https://<host>:<port>, IPv6 literals in brackets (and canonical). */
export function httpsUrl(host: string, port: number): string {
  return `https://${joinHostPort(canonicalIp(host) ?? host, port)}`;
}

/** The host of a URL without IPv6 brackets: "https://[::1]:6443" -> "::1". */
export function urlHost(url: string): string {
  return new URL(url).hostname.replace(/^\[|\]$/g, '');
}

/**
 * The n-th address of a CIDR (network address + n): 1 is the first service IP, 10 the
 * cluster DNS by convention. Throws an Error naming the CIDR when it is malformed or too small.
 */
export function cidrAddress(cidr: string, n: number): string {
  const [addr, bitsText] = cidr.trim().split('/');
  const ip = canonicalIp(addr ?? '');
  const bits = Number(bitsText);
  const width = ip?.includes(':') ? 128 : 32;
  if (ip === null || !/^\d+$/.test(bitsText ?? '') || bits > width) throw new Error(`"${cidr}" is not a CIDR`);
  const hostBits = BigInt(width - bits);
  // The network address (n = 0) always exists, even in a /32.
  if (n > 0 && BigInt(n) >= (1n << hostBits) - 1n) throw new Error(`"${cidr}" has no room for address number ${n}`);
  const network = (ipToBigInt(ip) >> hostBits) << hostBits;
  return bigIntToIp(network + BigInt(n), width);
}

/** Whether `ip` lies inside `cidr` (both already validated; a family mismatch is false). */
export function cidrContains(cidr: string, ip: string): boolean {
  const [net, bits] = cidr.split('/');
  const family = (s: string) => (isIPv6(s) ? 'ipv6' : 'ipv4');
  if (!net || !bits || family(net) !== family(ip)) return false;
  const list = new BlockList();
  list.addSubnet(net, Number(bits), family(net));
  return list.check(ip, family(ip));
}

/**
 * An IPv4 CIDR (a bare address: its /32) as its prefix length and its first and last address as
 * numbers, for interval work (nft sets); undefined for anything else, IPv6 and zone ids included.
 */
export function ipv4Range(cidr: string): { bits: number; first: bigint; last: bigint } | undefined {
  const [addr = '', bitsText] = cidr.split('/');
  const ip = addr.includes('%') ? null : canonicalIp(addr);
  const bits = bitsText === undefined ? 32 : /^\d{1,2}$/.test(bitsText) ? Number(bitsText) : 33;
  if (ip === null || ip.includes(':') || bits > 32) return undefined;
  const hostBits = BigInt(32 - bits);
  const first = (ipToBigInt(ip) >> hostBits) << hostBits;
  return { bits, first, last: first + (1n << hostBits) - 1n };
}

/**
 * A CIDR of either family as its prefix length and its first and last address as numbers, for
 * overlap checks; undefined when it is not `address/bits` or its address is not the network's
 * own (10.244.1.7/24 is a host in a range, not a range).
 */
export function cidrRange(cidr: string): { family: 4 | 6; bits: number; first: bigint; last: bigint } | undefined {
  const m = /^([^/%]+)\/(\d{1,3})$/.exec(cidr);
  const ip = m ? canonicalIp(m[1]!) : null;
  if (!m || ip === null) return undefined;
  const width = ip.includes(':') ? 128 : 32;
  const bits = Number(m[2]);
  if (bits > width) return undefined;
  const n = ipToBigInt(ip);
  const hostBits = BigInt(width - bits);
  const first = (n >> hostBits) << hostBits;
  if (first !== n) return undefined;
  return { family: width === 32 ? 4 : 6, bits, first, last: first + (1n << hostBits) - 1n };
}

/** The dotted quad of an IPv4 address given as a number (ipv4Range's). */
export const ipv4FromNumber = (n: bigint): string => bigIntToIp(n, 32);

/**
 * An IP address as the 32 hex digits of its 16 bytes, IPv4 as IPv4-mapped IPv6 (::ffff:a.b.c.d),
 * so that an IPv4 peer seen by a dual-stack socket compares equal; null when `ip` is not an IP.
 */
export function ipKey(ip: string): string | null {
  const c = canonicalIp(ip);
  if (c === null) return null;
  const n = c.includes(':') ? ipToBigInt(c) : (0xffffn << 32n) | ipToBigInt(c);
  return n.toString(16).padStart(32, '0');
}

// Node has no public IP <-> integer conversion; these two stay small because the input is
// already canonical (no embedded IPv4 in IPv6 after canonicalIp).
function ipToBigInt(ip: string): bigint {
  if (!ip.includes(':')) return ip.split('.').reduce((n, o) => (n << 8n) | BigInt(o), 0n);
  const [head, tail] = ip.includes('::') ? ip.split('::') : [ip, undefined];
  const left = head ? head.split(':') : [];
  const right = tail ? tail.split(':') : [];
  const groups = [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right];
  return groups.reduce((n, g) => (n << 16n) | BigInt(parseInt(g, 16)), 0n);
}

function bigIntToIp(n: bigint, width: number): string {
  if (width === 32) return [24n, 16n, 8n, 0n].map((s) => String((n >> s) & 255n)).join('.');
  const groups = Array.from({ length: 8 }, (_, i) => ((n >> BigInt(112 - 16 * i)) & 0xffffn).toString(16));
  return canonicalIp(groups.join(':')) ?? groups.join(':');
}

/** An IP address as its bytes (4 for IPv4, 16 for IPv6); null when `ip` is not an IP. */
export function ipBytes(ip: string): Buffer | null {
  const c = canonicalIp(ip);
  if (c === null) return null;
  const width = c.includes(':') ? 16 : 4;
  const out = Buffer.alloc(width);
  let n = ipToBigInt(c);
  for (let i = width - 1; i >= 0; i--, n >>= 8n) out[i] = Number(n & 255n);
  return out;
}

/** The canonical spelling of 4 or 16 address bytes (ipBytes's inverse). */
export function ipFromBytes(b: Buffer): string {
  const n = [...b].reduce((acc, x) => (acc << 8n) | BigInt(x), 0n);
  return bigIntToIp(n, b.length * 8);
}

/**
 * A cluster's endpoints behind a controller host's front door, as nodes use them: the door's
 * host:port, and the server names of the cluster's API, konnectivity server, join endpoint and node API tunnel.
 */
export interface FrontDoorEndpoint {
  address: string;
  api: string;
  konnectivity: string;
  join: string;
  /** The node API tunnel: API connections of clients that send no server name, in TLS with the node's certificate. */
  nodeApi: string;
  /** host:port every node serves the API on for its pods (the kubernetes Service's endpoint); absent from an older kctl. */
  nodeLocal?: string;
}

/** A FrontDoorEndpoint from untrusted JSON (a lease annotation, a token); undefined when it is not one. */
export function parseFrontDoorEndpoint(value: unknown): FrontDoorEndpoint | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const f = value as Record<string, unknown>;
  const text = (x: unknown): string => (typeof x === 'string' ? x : '');
  const e = {
    address: text(f.address),
    api: text(f.api),
    konnectivity: text(f.konnectivity),
    join: text(f.join),
    nodeApi: text(f.nodeApi),
  };
  if (!Object.values(e).every(Boolean) || !splitHostPort(e.address)) return undefined;
  const local = splitHostPort(text(f.nodeLocal));
  return local && isIPv4(local.host) ? { ...e, nodeLocal: joinHostPort(local.host, local.port) } : e;
}
