// Subject alternative names and addresses. SANs are kept as strings "DNS:<name>" or
// "IP:<canonical ip>" so sets compare with plain string equality and read well in logs.
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import { PkiError } from './errors.ts';

export type San = `DNS:${string}` | `IP:${string}`;

// RFC 1123 labels; '_' tolerated (seen in real DNS), '*' only as a whole leftmost label.
const DNS_NAME = /^(\*\.)?[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*$/;

/**
 * The one spelling of an IP address we compare with: IPv4 dotted quad, IPv6 as RFC 5952
 * (the WHATWG URL serializer does exactly that, so "0:0::1" and "::1" compare equal).
 */
export function canonicalIp(ip: string): string | null {
  const bare = ip.replace(/%.*$/, ''); // link-local zone ids ("fe80::1%eth0") are not part of a SAN
  switch (isIP(bare)) {
    case 4: return bare.split('.').map((o) => String(Number(o))).join('.');
    case 6: return new URL(`http://[${bare}]/`).hostname.slice(1, -1);
    default: return null;
  }
}

/** Classifies one configured name or address; `source` names where it came from for errors. */
export function toSan(value: string, source: string): San {
  const ip = canonicalIp(value.trim());
  if (ip !== null) return `IP:${ip}`;
  const name = value.trim().toLowerCase().replace(/\.$/, '');
  if (!DNS_NAME.test(name)) {
    throw new PkiError(`${source}: "${value}" is neither an IP address nor a DNS name; fix the config`);
  }
  return `DNS:${name}`;
}

/** Deduplicated, in first-seen order (stable output for logs and certificate bytes). */
export function sanSet(values: Iterable<San>): San[] {
  return [...new Set(values)];
}

export function sameSans(a: readonly San[], b: readonly San[]): boolean {
  const sa = new Set(a);
  const sb = new Set(b);
  return sa.size === sb.size && [...sa].every((s) => sb.has(s));
}

/** Every address of every local interface, IPv4 and IPv6, loopback included. */
export function localAddresses(): string[] {
  return Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((i) => i.address));
}

/** First usable address of each service CIDR (comma-separated for dual-stack): network + 1. */
export function firstServiceIps(serviceCIDR: string): string[] {
  return serviceCIDR.split(',').map((cidr) => cidr.trim()).filter(Boolean).map((cidr) => {
    const [addr, bitsText] = cidr.split('/');
    const ip = canonicalIp(addr ?? '');
    const bits = Number(bitsText);
    const width = ip?.includes(':') ? 128 : 32;
    if (ip === null || !/^\d+$/.test(bitsText ?? '') || bits > width - 2) {
      throw new PkiError(`spec.network.serviceCIDR: "${cidr}" is not a CIDR with room for a service IP (e.g. 10.96.0.0/12); fix the config`);
    }
    const hostBits = BigInt(width - bits);
    const network = (ipToBigInt(ip) >> hostBits) << hostBits;
    return bigIntToIp(network + 1n, width);
  });
}

// Node has no public IP <-> integer conversion; these two stay small because input is
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
  return canonicalIp(groups.join(':')) as string;
}

/** https://<address>:<port>, IPv6 literals in brackets. */
export function serverUrl(address: string, port: number): string {
  const ip = canonicalIp(address);
  const host = ip?.includes(':') ? `[${ip}]` : (ip ?? address);
  return `https://${host}:${port}`;
}
