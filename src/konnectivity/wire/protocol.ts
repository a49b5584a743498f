// The konnectivity wire protocol: packet builders, ids, metadata names and the kctl
// extension. Types, encode/decode and the gRPC services are generated from konnectivity.proto
// (gen/konnectivity.ts, `npm run gen`). int64 ids (random, connectID) are decimal strings end
// to end: `random` uses all 63 bits, which a JS number cannot hold.
import { randomBytes } from 'node:crypto';
import type * as grpc from '@grpc/grpc-js';
import { canonicalIp } from '../../base/addresses.ts';
import type { Int64, Packet } from './gen/konnectivity.ts';

export {
  AgentServiceClient,
  AgentServiceDefinition,
  ProxyServiceClient,
  ProxyServiceDefinition,
  decodePacket,
  encodePacket,
  type AgentServiceHandlers,
  type CloseDial,
  type CloseRequest,
  type CloseResponse,
  type Data,
  type DialRequest,
  type DialResponse,
  type Int64,
  type KctlCredit,
  type KctlDatagram,
  type KctlPing,
  type Packet,
  type PacketType,
  type ProxyServiceHandlers,
} from './gen/konnectivity.ts';

// ---- ids ----

const MAX_INT64 = (1n << 63n) - 1n;

/** A random positive 63-bit dial id, as kube-apiserver makes them. */
export function newRandom(): Int64 {
  const v = randomBytes(8).readBigUInt64BE() & MAX_INT64;
  return (v === 0n ? 1n : v).toString();
}

/** One id per dial, in every log line about it on the server and the agent. */
export function newTraceId(): string {
  return randomBytes(8).toString('hex');
}

/** True for a decimal int64 that is a valid id (> 0). */
export function isId(v: Int64 | undefined): v is Int64 {
  return v !== undefined && v !== '' && v !== '0' && /^[1-9][0-9]{0,18}$/.test(v);
}

// ---- packets ----

export const packets = {
  dialReq: (address: string, random: Int64, kctlTraceID = ''): Packet => ({
    type: 'DIAL_REQ',
    dialRequest: { protocol: 'tcp', address, random, kctlTraceID },
  }),
  dialRsp: (random: Int64, connectID: Int64, error = ''): Packet => ({
    type: 'DIAL_RSP',
    dialResponse: { random, connectID, error },
  }),
  closeReq: (connectID: Int64): Packet => ({ type: 'CLOSE_REQ', closeRequest: { connectID } }),
  closeRsp: (connectID: Int64, error = ''): Packet => ({ type: 'CLOSE_RSP', closeResponse: { connectID, error } }),
  data: (connectID: Int64, data: Buffer): Packet => ({ type: 'DATA', data: { connectID, error: '', data } }),
  dialCls: (random: Int64): Packet => ({ type: 'DIAL_CLS', closeDial: { random } }),
  drain: (): Packet => ({ type: 'DRAIN', drain: {} }),
  credit: (connectID: Int64, bytes: number): Packet => ({
    type: 'KCTL_CREDIT',
    kctlCredit: { connectID, bytes: String(bytes) },
  }),
  ping: (nonce: Int64): Packet => ({ type: 'KCTL_PING', kctlPing: { nonce } }),
  pong: (nonce: Int64): Packet => ({ type: 'KCTL_PONG', kctlPing: { nonce } }),
  /** To the server: `node` is the destination; from the server: the node it came from. */
  datagram: (node: string, data: Buffer): Packet => ({ type: 'KCTL_DATAGRAM', kctlDatagram: { node, data } }),
};

/** Short description of a packet for debug logs (never the payload). */
export function describePacket(p: Packet): Record<string, unknown> {
  switch (p.type) {
    case 'DIAL_REQ':
      return { type: p.type, address: p.dialRequest?.address, random: p.dialRequest?.random };
    case 'DIAL_RSP':
      return {
        type: p.type,
        random: p.dialResponse?.random,
        connectID: p.dialResponse?.connectID,
        error: p.dialResponse?.error || undefined,
      };
    case 'DATA':
      return { type: p.type, connectID: p.data?.connectID, bytes: p.data?.data?.length ?? 0 };
    case 'CLOSE_REQ':
      return { type: p.type, connectID: p.closeRequest?.connectID };
    case 'CLOSE_RSP':
      return { type: p.type, connectID: p.closeResponse?.connectID, error: p.closeResponse?.error || undefined };
    case 'DIAL_CLS':
      return { type: p.type, random: p.closeDial?.random };
    case 'KCTL_DATAGRAM':
      return { type: p.type, node: p.kctlDatagram?.node, bytes: p.kctlDatagram?.data?.length ?? 0 };
    default:
      return { type: p.type };
  }
}

// ---- metadata and the kctl extension ----

export const META = {
  agentId: 'agentid',
  agentIdentifiers: 'agentidentifiers',
  authorization: 'authorization',
  serverId: 'serverid',
  serverCount: 'servercount',
  /** kctl extension negotiation: the agent offers, the server answers with what it accepts. */
  extensions: 'kctl-extensions',
} as const;

export const FLOW_CONTROL_EXTENSION = 'flow-control/1';

/**
 * node-name/1: the agent dials its own node's name itself (to the address its kubelet serves on),
 * so a server sends a dial for that name as it came. kube-apiserver dials kubelets by node name;
 * for an agent without it (an older kctl worker, an upstream agent) the server puts the node's
 * address in its place.
 */
export const NODE_NAME_EXTENSION = 'node-name/1';

/**
 * flow-control/1: every established connection starts with this many bytes of credit in each
 * direction; the receiver grants more (KCTL_CREDIT) as its local sink drains.
 */
export const INITIAL_WINDOW = 256 * 1024;

/**
 * The receive window a connection grows to while its sink keeps up (see flow.ts): one stream
 * through a frontend whose own HTTP/2 window is small needs megabytes in flight.
 */
export const MAX_WINDOW = 4 * 1024 * 1024;

/** Window growth one server or agent process grants in all (the memory a few fast connections may hold). */
export const WINDOW_GROWTH_BUDGET = 32 * 1024 * 1024;

/** Largest DATA payload we send: one read of a target socket (grpc-js costs ~40 µs per message). */
export const MAX_DATA_CHUNK = 64 * 1024;

/** Whether a kctl-extensions header (a comma-separated list, possibly repeated) names `extension`. */
export function offersExtension(value: grpc.MetadataValue[] | undefined, extension: string): boolean {
  return (value ?? []).some((v) =>
    String(v)
      .split(',')
      .map((s) => s.trim())
      .includes(extension),
  );
}

export interface AgentIdentifiers {
  host: string[];
  ipv4: string[];
  ipv6: string[];
  cidr: string[];
  defaultRoute: boolean;
}

/** `host=node1&ipv4=10.0.0.5&default-route=true` -> identifiers. */
export function parseIdentifiers(query: string): AgentIdentifiers {
  const q = new URLSearchParams(query);
  return {
    host: q.getAll('host').map((h) => h.toLowerCase()),
    ipv4: q.getAll('ipv4'),
    ipv6: q.getAll('ipv6').map((a) => canonicalIp(a) ?? a.toLowerCase()),
    cidr: q.getAll('cidr'),
    defaultRoute: q.getAll('default-route').includes('true'),
  };
}

export function formatIdentifiers(ids: Partial<AgentIdentifiers>): string {
  const q = new URLSearchParams();
  for (const h of ids.host ?? []) q.append('host', h);
  for (const a of ids.ipv4 ?? []) q.append('ipv4', a);
  for (const a of ids.ipv6 ?? []) q.append('ipv6', a);
  for (const c of ids.cidr ?? []) q.append('cidr', c);
  if (ids.defaultRoute) q.append('default-route', 'true');
  return q.toString();
}
