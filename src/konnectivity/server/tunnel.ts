// The two kinds of entries in the broker's tables: a Tunnel (one tunneled connection, from its
// frontend to its agent) and an AgentBackend (one agent's Connect stream, with the identifiers
// routing may use). The broker (broker.ts) moves tunnels between states and routing.ts picks
// an agent for a dial; nothing here routes.
import type * as grpc from '@grpc/grpc-js';
import type { AgentIdentity, AuthSource } from './auth.ts';
import type { ClaimVerdict, DroppedClaim } from './claims.ts';
import { ConnectionFlow, type WindowBudget } from '../wire/flow.ts';
import type { DialFailureReason } from './metrics.ts';
import {
  FLOW_CONTROL_EXTENSION,
  INITIAL_WINDOW,
  MAX_WINDOW,
  NODE_NAME_EXTENSION,
  type AgentIdentifiers,
  type Int64,
  type Packet,
} from '../wire/protocol.ts';
import { StreamWriter } from '../wire/stream-writer.ts';

/**
 * One agent's Connect stream as the server uses it: a grpc-js ServerDuplexStream (h2), or a
 * LinkAgentCall (kctl-tunnel/1), which has the same shape. Emitting 'error' with a status code
 * ends it with that status.
 */
export interface AgentCall extends AuthSource {
  readonly cancelled: boolean;
  getPeer(): string;
  sendMetadata(md: grpc.Metadata): void;
  write(p: Packet): boolean;
  end(): void;
  on(event: 'data', listener: (p: Packet) => void): unknown;
  on(event: 'error', listener: (err: Error & { code?: number }) => void): unknown;
  on(event: 'end' | 'cancelled' | 'close', listener: () => void): unknown;
  once(event: 'drain' | 'close' | 'cancelled', listener: () => void): unknown;
  emit(event: 'error', status: { code: grpc.status; details: string }): boolean;
}

/** The client side of one tunnel: a kube-apiserver Proxy stream or an HTTP-CONNECT socket. */
export interface Frontend {
  readonly kind: 'grpc' | 'http-connect';
  /** The agent dialed the target; relay bytes from now on. */
  established(connectID: Int64): void;
  dialFailed(message: string, reason: DialFailureReason): void;
  /** Bytes from the target; `flushed` runs once they left this process. */
  write(buf: Buffer, flushed: () => void): void;
  /** The tunnel is over; tell the client (CLOSE_RSP / end of socket) and let go. */
  close(error?: string): void;
  pauseReading(): void;
  resumeReading(): void;
}

type TunnelState = 'pending' | 'established' | 'closing' | 'done';

export class Tunnel {
  state: TunnelState = 'pending';
  connectID: Int64 | undefined;
  timer: NodeJS.Timeout | undefined;
  readingPaused = false;
  /** The frontend was told the tunnel is over, or is gone itself. */
  frontendDone = false;
  /** The client closed while bytes still waited for credit: close once they are sent. */
  closeAfterFlush = false;
  readonly flow: ConnectionFlow;
  readonly startedAt = process.hrtime.bigint();

  constructor(
    readonly trace: string,
    readonly random: Int64,
    readonly address: string,
    readonly agent: AgentBackend,
    readonly frontend: Frontend,
    bufferLimit: number,
    budget: WindowBudget,
  ) {
    this.flow = new ConnectionFlow({
      negotiated: agent.flowControl,
      window: INITIAL_WINDOW,
      maxWindow: MAX_WINDOW,
      budget,
      bufferLimit,
    });
  }

  logFields(): Record<string, unknown> {
    return {
      trace: this.trace,
      agent: this.agent.id,
      random: this.random,
      connectID: this.connectID,
      address: this.address,
      frontend: this.frontend.kind,
    };
  }
}

/** One agent's Connect stream. */
export class AgentBackend {
  draining = false;
  gone = false;
  readonly connectedAt = new Date();
  /** When the agent last sent anything on this stream (ms since the epoch). */
  lastReceived = Date.now();
  /**
   * The agent opened a newer stream while this one was silent: probably a stream whose peer
   * vanished (a partition the agent noticed first). Pinged; routing avoids it until it answers.
   */
  suspect = false;
  readonly conns = new Map<Int64, Tunnel>();
  readonly pending = new Set<Tunnel>();
  private readonly writer = new StreamWriter<Packet>(() => this.onDrain(this));
  private verdict: ClaimVerdict;

  constructor(
    /** Who the agent is (auth.ts brokerId): one stream per id is used for dials. */
    readonly id: string,
    /** The agentid the agent sent: shown, never used to route. */
    readonly claimedId: string,
    /** What the agent sent in agentidentifiers; `identifiers` is what it was granted. */
    readonly claimed: AgentIdentifiers,
    verdict: ClaimVerdict,
    readonly identity: AgentIdentity,
    /** The kctl extensions this stream agreed on (protocol.ts: flow-control/1, node-name/1). */
    readonly extensions: readonly string[],
    private readonly call: AgentCall,
    private readonly onDrain: (a: AgentBackend) => void,
    /** Counts each packet sent to the agent (metrics: segment to_agent). */
    private readonly countSent: (packetType: string | number) => void = () => {},
  ) {
    this.verdict = verdict;
  }

  /** The stream's remote end ("host:port"; the front door's own end for a connection it handed on). */
  get peer(): string {
    return this.call.getPeer();
  }

  /** A kctl agent that takes credit and trace ids (flow-control/1). */
  get flowControl(): boolean {
    return this.extensions.includes(FLOW_CONTROL_EXTENSION);
  }

  /** An agent that dials its own node's name itself (node-name/1); others get the node's address instead. */
  get dialsOwnName(): boolean {
    return this.extensions.includes(NODE_NAME_EXTENSION);
  }

  /** The identifiers routing uses: the claims that survived the claim rules (claims.ts). */
  get identifiers(): AgentIdentifiers {
    return this.verdict.accepted;
  }

  get dropped(): DroppedClaim[] {
    return this.verdict.dropped;
  }

  /** Nodes changed: new dials follow the new verdict; established tunnels are not touched. */
  rejudged(verdict: ClaimVerdict): void {
    this.verdict = verdict;
  }

  /** False while the stream's send buffer is full; frontends pause until it drains. */
  get writable(): boolean {
    return this.writer.ready && !this.gone;
  }

  send(p: Packet): void {
    if (this.gone) return;
    this.countSent(p.type);
    this.writer.write(this.call, p);
  }

  end(): void {
    this.call.end();
  }

  /** Anything arrived from the agent: the stream is alive. */
  heard(): void {
    this.lastReceived = Date.now();
    this.suspect = false;
  }

  /** Milliseconds since the agent last sent anything on this stream. */
  get silentMs(): number {
    return Date.now() - this.lastReceived;
  }

  /** One of this agent's accepted names or addresses is exactly `host` (canonical spelling). */
  namesExactly(host: string): boolean {
    const ids = this.identifiers;
    return ids.host.includes(host) || ids.ipv4.includes(host) || ids.ipv6.includes(host);
  }
}
