// Opening one agent stream to one server: TLS credentials (offering kctl-tunnel/1 or the ALPN
// protocols the user set), the Connect metadata (identity, identifiers, token, extensions), and
// the transport: kctl-tunnel/1 when the server chooses it, else gRPC. What flows on the stream
// once it is open is connection.ts's.
import { readFile } from 'node:fs/promises';
import * as grpc from '@grpc/grpc-js';
import { splitHostPort } from '../../base/addresses.ts';
import type { ConnectionOptions } from './options.ts';
import { LINK_ALPN } from '../wire/link.ts';
import { openLink, type CallError } from '../wire/link-calls.ts';
import {
  AgentServiceClient,
  FLOW_CONTROL_EXTENSION,
  NODE_NAME_EXTENSION,
  META,
  formatIdentifiers,
  type Packet,
} from '../wire/protocol.ts';

/**
 * `creds` offering `protocols` before h2 in the TLS handshake. grpc-js always offers h2 alone; its
 * connector keeps the options it passes to tls.connect, and those are amended here.
 */
function withAlpn(creds: grpc.ChannelCredentials, protocols: string[]): grpc.ChannelCredentials {
  if (protocols.length === 0) return creds;
  const wrapped = Object.create(creds) as grpc.ChannelCredentials;
  type Connector = ReturnType<grpc.ChannelCredentials['_createSecureConnector']> & {
    connectionOptions?: { ALPNProtocols?: string[] };
  };
  wrapped._createSecureConnector = (...args) => {
    const connector: Connector = creds._createSecureConnector(...args);
    if (!connector.connectionOptions)
      throw new Error('this grpc-js cannot offer ALPN protocols (--alpn-proto); report a bug');
    connector.connectionOptions.ALPNProtocols = [...protocols.filter((p) => p !== 'h2'), 'h2'];
    return connector;
  };
  return wrapped;
}

function bufferOrUndefined(v: string | Buffer | undefined): Buffer | undefined {
  return v === undefined ? undefined : typeof v === 'string' ? Buffer.from(v) : v;
}

function bufferOrNull(v: string | Buffer | undefined): Buffer | null {
  return bufferOrUndefined(v) ?? null;
}

/** The agent stream on either transport: a grpc-js ClientDuplexStream or a LinkServerCall. */
export interface ServerCall {
  write(p: Packet, flushed?: () => void): boolean;
  end(): void;
  cancel(): void;
  on(event: 'data', listener: (p: Packet) => void): unknown;
  on(event: 'error', listener: (err: CallError) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  once(event: 'metadata', listener: (h: grpc.Metadata) => void): unknown;
  once(event: 'error', listener: (err: CallError) => void): unknown;
  once(event: 'end' | 'status' | 'drain', listener: () => void): unknown;
  off(event: 'metadata', listener: (h: grpc.Metadata) => void): unknown;
  off(event: 'error', listener: (err: CallError) => void): unknown;
  off(event: 'end', listener: () => void): unknown;
}

/** gRPC keepalive towards any server: upstream refuses pings more often than every 30 s. */
const UPSTREAM_SAFE_KEEPALIVE_MS = 31_000;
/** How long a server has to send its serverid/servercount headers. */
export const HEADER_TIMEOUT_MS = 15_000;
/**
 * TCP and TLS to a kctl server: 5 s holds a 600 ms path with a lost SYN or two. An attempt that
 * starts during a partition gives up then and the next starts fresh, instead of waiting on the
 * kernel's SYN retries (1, 3, 7, 15 s apart) after the link is back.
 */
export const CONNECT_TIMEOUT_MS = 5_000;

/** The stream's TLS credentials and the ALPN protocols they offer. */
export function channelCredentials(o: ConnectionOptions): grpc.ChannelCredentials {
  return withAlpn(
    grpc.credentials.createSsl(bufferOrNull(o.ca), bufferOrNull(o.key), bufferOrNull(o.cert)),
    o.alpnProtocols ?? [],
  );
}

/** What a Connect says about the agent; the service-account token is read on every connect (tokens rotate). */
export async function connectMetadata(o: ConnectionOptions): Promise<grpc.Metadata> {
  const md = new grpc.Metadata();
  md.set(META.agentId, o.agentId);
  md.set(META.agentIdentifiers, formatIdentifiers(o.identifiers ?? {}));
  const auth = await tokenMetadata(o);
  if (auth) md.set(META.authorization, auth);
  const offered = offeredExtensions(o);
  if (offered.length) md.set(META.extensions, offered.join(','));
  return md;
}

/** The kctl extensions this agent offers a server: none with extensions off. */
export function offeredExtensions(o: ConnectionOptions): string[] {
  if (!(o.extensions ?? true)) return [];
  return [FLOW_CONTROL_EXTENSION, ...(Object.keys(o.localNames ?? {}).length > 0 ? [NODE_NAME_EXTENSION] : [])];
}

async function tokenMetadata(o: ConnectionOptions): Promise<string | undefined> {
  if (!o.serviceAccountTokenPath) return undefined;
  const token = (await readFile(o.serviceAccountTokenPath, 'utf8')).trim();
  if (!token) throw new Error(`${o.serviceAccountTokenPath} is empty`);
  return `Bearer ${token}`;
}

/** An agent stream just opened, before the server's headers. */
export interface OpenedStream {
  call: ServerCall;
  /** The gRPC channel the stream runs on (none on kctl-tunnel/1). */
  client: grpc.Client | undefined;
  transport: 'grpc' | typeof LINK_ALPN;
}

/** kctl-tunnel/1 first (see openLinkStream), else a gRPC Connect. */
export async function openServerStream(
  address: string,
  o: ConnectionOptions,
  creds: grpc.ChannelCredentials,
  md: grpc.Metadata,
): Promise<OpenedStream> {
  const link = await openLinkStream(address, o, md);
  if (link) return { call: link, client: undefined, transport: LINK_ALPN };
  const options: grpc.ChannelOptions = {
    // Every stream its own TCP connection: behind a load balancer that is how we reach
    // the other servers, and a dead connection is closed with its stream.
    'grpc.use_local_subchannel_pool': 1,
    'grpc.enable_channelz': 0,
    'grpc.keepalive_time_ms': UPSTREAM_SAFE_KEEPALIVE_MS,
    'grpc.keepalive_timeout_ms': 10_000,
    'grpc.max_receive_message_length': 16 * 1024 * 1024,
    // Never paused (per-connection credit does that), so a small HTTP/2 window only adds
    // round trips.
    'grpc-node.flow_control_window': 8 * 1024 * 1024,
    ...(o.serverName ? { 'grpc.ssl_target_name_override': o.serverName, 'grpc.default_authority': o.serverName } : {}),
  };
  const client = new AgentServiceClient(address, creds, options);
  return { call: client.Connect(md), client, transport: 'grpc' };
}

/**
 * kctl-tunnel/1 first, unless extensions are off or the user set the ALPN protocols to offer:
 * null when the server chose h2 (an upstream server), and gRPC is used instead.
 */
async function openLinkStream(address: string, o: ConnectionOptions, md: grpc.Metadata): Promise<ServerCall | null> {
  if (!(o.extensions ?? true) || (o.alpnProtocols ?? []).length > 0) return null;
  const target = splitHostPort(address);
  if (!target) return null;
  return openLink(
    {
      ...target,
      ca: bufferOrUndefined(o.ca),
      cert: bufferOrUndefined(o.cert),
      key: bufferOrUndefined(o.key),
      serverName: o.serverName,
      timeoutMs: CONNECT_TIMEOUT_MS,
    },
    md,
  );
}
