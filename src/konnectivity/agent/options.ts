// What a konnectivity agent is told at start: servers, credentials, identity, timings. Its own
// file so the agent and its per-server connections both read it without importing each other.
import type { Logger } from '../../base/log.ts';
import type { AgentIdentifiers } from '../wire/protocol.ts';

export interface ServerAddress {
  host: string;
  port: number;
  /** The TLS server name for this server alone (a front door routes by it); else `serverName`, else the host. */
  serverName?: string;
}

export interface KonnectivityAgentOptions {
  /** Every controller's agent endpoint; one address may also be a load balancer. */
  servers: ServerAddress[];
  /** PEM of the CA that signed the servers' certificates; without it, the system's trusted CAs. */
  ca?: string | Buffer;
  /** Client certificate (node cert: O=system:nodes, CN=system:node:<name>) and key, PEM. */
  cert?: string | Buffer;
  key?: string | Buffer;
  /** Service-account token file, read on every connect (tokens rotate). */
  serviceAccountTokenPath?: string;
  /** TLS name to verify instead of the address host. */
  serverName?: string;
  agentId: string;
  identifiers?: Partial<AgentIdentifiers>;
  /** Target dial timeout. Default 5 s. */
  dialTimeoutMs?: number;
  /** kctl servers: ping when silent this long. Default 5 s. */
  keepaliveTimeMs?: number;
  /** kctl servers: declared dead when silent this much longer. Default 10 s. */
  keepaliveTimeoutMs?: number;
  /** First retry delay; grows x1.5 up to the cap, each wait drawn from [b/2, b]. Default 1 s and 10 s. */
  syncIntervalMs?: number;
  syncIntervalCapMs?: number;
  /** Keep probing for new servers even when holding servercount of them. Default false. */
  syncForever?: boolean;
  /** On stop, wait this long for open connections to finish after DRAIN. Default 0. */
  drainTimeoutMs?: number;
  /** ALPN protocols offered before h2 (upstream --alpn-proto), for a proxy that routes by ALPN. */
  alpnProtocols?: string[];
  /**
   * Another source of the server count (upstream --count-server-leases: the servers' leases).
   * With it, the count is its answer ('default') or the larger of it and the servers' own
   * servercount ('max').
   */
  serverCounter?: { count(): number };
  serverCountSource?: 'default' | 'max';
  /** Offer kctl extensions. Default true. */
  extensions?: boolean;
  /** Per-connection buffer towards a stalled target when the server sends without credit. Default 4 MiB. */
  upstreamBufferLimit?: number;
  /**
   * The longest the client's bytes are held back from a target that keeps sending while the agent
   * cannot forward it all (see Target.fromServer). Default 5 s.
   */
  holdMaxMs?: number;
  /**
   * Names this agent dials at another address instead of looking them up: a kctl worker's agent
   * maps its node's name to the node's address, where kubelet serves (kube-apiserver dials kubelets
   * by node name). With any, the agent offers node-name/1 to kctl servers. Keys in lower case.
   */
  localNames?: Record<string, string>;
  /** A datagram another node sent this one through a kctl server (sendDatagram); `fromNode` as the server vouches. */
  onDatagram?: (fromNode: string, data: Buffer) => void;
  log: Logger;
}

/** The agent's defaults, for every option that has one. */
export const AGENT_DEFAULTS = {
  dialTimeoutMs: 5_000,
  keepaliveTimeMs: 5_000,
  keepaliveTimeoutMs: 10_000,
  syncIntervalMs: 1_000,
  syncIntervalCapMs: 10_000,
  drainTimeoutMs: 0,
  upstreamBufferLimit: 4 * 1024 * 1024,
  holdMaxMs: 5_000,
} satisfies Partial<KonnectivityAgentOptions>;

/** The agent's options with AGENT_DEFAULTS applied. */
export type AgentOptionsWithDefaults = Required<Pick<KonnectivityAgentOptions, keyof typeof AGENT_DEFAULTS>> &
  KonnectivityAgentOptions;

/** The agent options a server connection reads, defaults applied. */
export type ConnectionOptions = Pick<
  KonnectivityAgentOptions,
  | 'ca'
  | 'cert'
  | 'key'
  | 'serverName'
  | 'agentId'
  | 'identifiers'
  | 'extensions'
  | 'serviceAccountTokenPath'
  | 'alpnProtocols'
  | 'localNames'
> &
  Required<
    Pick<
      KonnectivityAgentOptions,
      'dialTimeoutMs' | 'keepaliveTimeMs' | 'keepaliveTimeoutMs' | 'upstreamBufferLimit' | 'holdMaxMs'
    >
  >;
