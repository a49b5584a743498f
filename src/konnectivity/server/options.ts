// What a konnectivity server is told at start: its identity and count, where kube-apiserver and
// agents reach it, its certificates, how agents are authenticated and judged, and its timings.
import type { Logger } from '../../base/log.ts';
import type { TokenReview } from './auth.ts';
import type { ProxyStrategy } from './routing.ts';
import type { NodeDirectory } from '../../base/ownership.ts';
import type { TrustedAgents } from './claims.ts';
import type { TcpFrontend } from './frontend-listeners.ts';
import type { DialWait } from './waiting-dials.ts';
import { definedOnly } from '../../base/defined.ts';

export interface KonnectivityServerOptions {
  /** Unique per controller; default a random UUID. Agents use it to tell servers apart. */
  serverId?: string;
  /** Live controller count, read on every agent Connect (follows the cluster, ANP#273). Default 1. */
  serverCount?: () => number;
  /** Unix socket for kube-apiserver's egress selector in GRPC mode; none when unset. */
  udsPath?: string;
  /** Unix socket for HTTP-CONNECT mode; none when unset. */
  httpConnectUdsPath?: string;
  /** Permissions of those sockets. Default 0600 (kctl's kube-apiserver runs as the same user). */
  udsMode?: number;
  /** A file already at a socket path is replaced (default); false fails the start instead. */
  replaceSockets?: boolean;
  /** A kube-apiserver frontend on TCP with mutual TLS; none when unset. */
  tcpFrontend?: TcpFrontend;
  /** Agent listener. Default 0.0.0.0. */
  agentBindAddress?: string;
  /** 0 picks a free port (tests); see agentPort() after start. */
  agentPort: number;
  /**
   * Connections to the agent port that have not authenticated yet, at most; at the cap, a new one
   * closes the one that has waited longest. Default 256.
   */
  maxUnauthenticatedAgents?: number;
  /** From accept to an authenticated Connect (the TLS handshake included), at most. Default 10 s. */
  agentAuthTimeoutMs?: number;
  /** Default 127.0.0.1. */
  adminBindAddress?: string;
  /** /healthz, /readyz, /metrics; no admin server when unset. 0 picks a free port. */
  adminPort?: number;
  /** PEM: the server's certificate and key, and the cluster CA that signs agent certificates. */
  tls: { cert: string | Buffer; key: string | Buffer; ca?: string | Buffer };
  /** Accept service-account tokens (upstream agents in pods); refused when unset. */
  tokenReview?: TokenReview;
  /**
   * Who may be an agent. 'nodes' (kctl's, the default): a node client certificate of the cluster
   * CA, or a service-account token (tokenReview). 'upstream' (the standalone drop-in, as upstream's
   * proxy-server): with tokenReview, a valid token is required; else with a CA, any certificate it
   * signed; else any client that completes TLS (the CLI warns).
   */
  agentAuth?: 'nodes' | 'upstream';
  /**
   * The cluster's Nodes: agents keep only the identifiers their own Node reports (base/ownership.ts),
   * judged again whenever Nodes change. Without it a node certificate vouches for its own node
   * name only and addresses are taken as claimed (upstream's behaviour).
   */
  nodes?: NodeDirectory;
  /** Agents that may also claim CIDRs, default-route and addresses no Node reports. */
  trustedAgents?: TrustedAgents;
  /** Default destHost, then default (any ready agent). */
  proxyStrategies?: ProxyStrategy[];
  /** How long an agent has to answer a dial. Default 10 s. */
  dialTimeoutMs?: number;
  /** How long an agent has to confirm a close. Default 10 s. */
  closeTimeoutMs?: number;
  /** We ping agents this often and drop them when a ping is not answered in the timeout. */
  keepaliveTimeMs?: number;
  keepaliveTimeoutMs?: number;
  /** Offer kctl extensions (flow control, trace ids) to agents that ask. Default true. */
  extensions?: boolean;
  /** Per-connection buffer towards a stalled client when the agent is upstream. Default 4 MiB. */
  upstreamBufferLimit?: number;
  /**
   * Relay datagrams between node agents (datagrams.ts; spec.network.relay: controllers), with
   * each node's rate bound. Off when unset: datagrams are dropped.
   */
  datagramRelay?: { rateBytesPerS?: number; burstBytes?: number };
  /**
   * A dial whose host no connected agent serves, but whose agent is expected soon, waits for it
   * (waiting-dials.ts). Off when unset: such a dial fails at once, as upstream's.
   */
  dialWait?: DialWait;
  log: Logger;
}

/** Every default of the server's options, in one place (the agent's are AGENT_DEFAULTS). */
export const SERVER_DEFAULTS = {
  udsMode: 0o600,
  replaceSockets: true,
  agentBindAddress: '0.0.0.0',
  adminBindAddress: '127.0.0.1',
  agentAuth: 'nodes' as const,
  proxyStrategies: ['destHost', 'default'] as ProxyStrategy[],
  dialTimeoutMs: 10_000,
  closeTimeoutMs: 10_000,
  keepaliveTimeMs: 10_000,
  keepaliveTimeoutMs: 5_000,
  extensions: true,
  upstreamBufferLimit: 4 * 1024 * 1024,
} satisfies Partial<KonnectivityServerOptions>;

/** The server's options with SERVER_DEFAULTS applied. */
export type ServerOptionsWithDefaults = Required<Pick<KonnectivityServerOptions, keyof typeof SERVER_DEFAULTS>> &
  KonnectivityServerOptions;

/** The options as given, an option given as undefined keeping its default. */
export function withServerDefaults(o: KonnectivityServerOptions): ServerOptionsWithDefaults {
  return { ...SERVER_DEFAULTS, ...definedOnly(o) };
}
