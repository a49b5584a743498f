// Subject alternative names and addresses. SANs are kept as strings "DNS:<name>" or
// "IP:<canonical ip>" so sets compare with plain string equality and read well in logs.
import { networkInterfaces } from 'node:os';
import { canonicalIp, cidrAddress } from '../base/addresses.ts';
import { PkiError } from './errors.ts';

export type San = `DNS:${string}` | `IP:${string}`;

// RFC 1123 labels; '_' tolerated (seen in real DNS), '*' only as a whole leftmost label.
const DNS_NAME = /^(\*\.)?[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*$/;

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
  return serviceCIDR
    .split(',')
    .map((cidr) => cidr.trim())
    .filter(Boolean)
    .map((cidr) => {
      try {
        return cidrAddress(cidr, 1);
      } catch {
        throw new PkiError(
          `spec.network.serviceCIDR: "${cidr}" is not a CIDR with room for a service IP (e.g. 10.96.0.0/12); fix the config`,
        );
      }
    });
}
