// The konnectivity agent, in the worker process (and behind `kctl konnectivity-agent`). It
// dials OUT to every konnectivity server and carries the connections kube-apiserver asks
// for (kubelet logs/exec/port-forward, webhooks, aggregated APIs) to targets on this side.
//
// - HA without a load balancer: it holds a stream to every listed server address, and like
//   upstream it also discovers servers behind one address: each server tells its serverid
//   and servercount, and the agent dials until it holds servercount distinct servers
//   (duplicates dropped, backoff 1 s x1.5 with jitter, capped).
// - With a kctl server (kctl-extensions: flow-control/1 answered), per-connection credit
//   windows, trace ids from the server, and app-level pings that notice a dead server in
//   seconds. With an upstream server, none of that: plain protocol, gRPC keepalive no more
//   often than upstream's 30 s enforcement floor.
import { readFile } from 'node:fs/promises';
import { connect as netConnect, type Socket } from 'node:net';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from '../log/logger.ts';
import type { Component, ComponentState, ComponentStatus } from '../supervisor/component.ts';
import { ConnectionFlow, WindowBudget } from './flow.ts';
import { AgentMetrics } from './metrics.ts';
import {
  FLOW_CONTROL_EXTENSION, INITIAL_WINDOW, META, MAX_DATA_CHUNK, MAX_WINDOW, WINDOW_GROWTH_BUDGET, describePacket, formatIdentifiers, isId,
  joinHostPort, AgentServiceClient, newRandom, newTraceId, offersFlowControl, packets, splitHostPort,
  type AgentIdentifiers, type Int64, type Packet,
} from './protocol.ts';

export interface ServerAddress {
  host: string;
  port: number;
}

export interface KonnectivityAgentOptions {
  /** Every controller's agent endpoint; one address may also be a load balancer. */
  servers: ServerAddress[];
  /** PEM of the CA that signed the servers' certificates. */
  ca: string | Buffer;
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
  /** First retry delay; grows x1.5 with jitter up to the cap. Default 1 s and 10 s. */
  syncIntervalMs?: number;
  syncIntervalCapMs?: number;
  /** Keep probing for new servers even when holding servercount of them. Default false. */
  syncForever?: boolean;
  /** On stop, wait this long for open connections to finish after DRAIN. Default 0. */
  drainTimeoutMs?: number;
  /** Offer kctl extensions. Default true. */
  extensions?: boolean;
  /** Per-connection buffer towards a stalled target when the server sends without credit. Default 4 MiB. */
  upstreamBufferLimit?: number;
  log: Logger;
}

/** gRPC keepalive towards any server: upstream refuses pings more often than every 30 s. */
const UPSTREAM_SAFE_KEEPALIVE_MS = 31_000;
/** How long a server has to send its serverid/servercount headers. */
const HEADER_TIMEOUT_MS = 15_000;

interface AddressState {
  readonly addr: ServerAddress;
  readonly label: string;
  conns: number;
  dialing: boolean;
  /** The last attempt reached a server we already hold. */
  lastDuplicate: boolean;
  backoffMs: number;
  nextAttemptAt: number;
}

export interface AgentServerSnapshot {
  address: string;
  serverId: string;
  serverCount: number;
  extensions: string[];
  connections: number;
  pendingDials: number;
}

export interface AgentSnapshot {
  agentId: string;
  knownServerCount: number;
  servers: AgentServerSnapshot[];
}

export interface TargetStats {
  trace: string;
  serverId: string;
  connectID: string;
  unflushed: number;
  peakUnflushed: number;
  held: number;
  peakHeld: number;
}

const ERROR_TEXT: Record<string, string> = {
  ECONNREFUSED: 'connect: connection refused',
  ECONNRESET: 'connection reset by peer',
  EHOSTUNREACH: 'connect: no route to host',
  ENETUNREACH: 'connect: network is unreachable',
  ETIMEDOUT: 'i/o timeout',
  EMFILE: 'socket: too many open files',
  ENFILE: 'socket: too many open files in system',
  EADDRNOTAVAIL: 'connect: cannot assign requested address',
};

/** Go-style dial errors, the text kube-apiserver users see and search for. */
function dialErrorText(address: string, host: string, err: NodeJS.ErrnoException): string {
  if (err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN') return `dial tcp: lookup ${host}: no such host`;
  return `dial tcp ${address}: ${ERROR_TEXT[err.code ?? ''] ?? err.message}`;
}

function jittered(ms: number): number {
  return Math.round(ms * (1 + Math.random() * 0.5));
}

export class KonnectivityAgent implements Component {
  readonly name = 'konnectivity-agent';
  readonly metrics: AgentMetrics;
  private readonly log: Logger;
  private readonly addresses: AddressState[];
  /** Live streams by serverID: at most one per server. */
  private readonly conns = new Map<string, ServerConnection>();
  private readonly dialingConns = new Set<ServerConnection>();
  private knownServerCount = 1;
  private timer: NodeJS.Timeout | undefined;
  private state: ComponentState = 'pending';
  private stopping = false;
  private startedAt = 0;
  private lastError: string | undefined;
  private readyWaiters: (() => void)[] = [];
  /** Options with defaults applied (read by the per-server connections in this module). */
  /** Window growth for every target connection of this agent, whichever server it came from. */
  readonly windowBudget = new WindowBudget(WINDOW_GROWTH_BUDGET);
  readonly o: Required<Pick<KonnectivityAgentOptions, 'dialTimeoutMs' | 'keepaliveTimeMs' | 'keepaliveTimeoutMs' | 'syncIntervalMs' | 'syncIntervalCapMs' | 'drainTimeoutMs' | 'upstreamBufferLimit'>> & KonnectivityAgentOptions;

  constructor(opts: KonnectivityAgentOptions) {
    if (opts.servers.length === 0) throw new Error('konnectivity agent needs at least one server address');
    if (!opts.cert !== !opts.key) throw new Error('konnectivity agent needs both a client certificate and its key, or neither');
    if (!opts.cert && !opts.serviceAccountTokenPath) throw new Error('konnectivity agent needs a client certificate or a service-account token path');
    this.o = {
      dialTimeoutMs: 5_000, keepaliveTimeMs: 5_000, keepaliveTimeoutMs: 10_000,
      syncIntervalMs: 1_000, syncIntervalCapMs: 10_000, drainTimeoutMs: 0, upstreamBufferLimit: 4 * 1024 * 1024,
      ...opts,
    };
    this.log = opts.log;
    this.addresses = opts.servers.map((addr) => ({
      addr, label: joinHostPort(addr.host, addr.port), conns: 0, dialing: false, lastDuplicate: false,
      backoffMs: this.o.syncIntervalMs, nextAttemptAt: 0,
    }));
    this.metrics = new AgentMetrics({
      openServerConnections: () => this.conns.size,
      knownServerCount: () => this.knownServerCount,
      openEndpointConnections: () => {
        let n = 0;
        for (const c of this.conns.values()) n += c.targets.size;
        return n;
      },
    });
  }

  async init(): Promise<void> {}

  async start(): Promise<void> {
    this.state = 'starting';
    this.startedAt = Date.now();
    this.tick();
  }

  /** Resolves once the agent holds a stream to at least one server. */
  ready(signal: AbortSignal): Promise<void> {
    if (this.conns.size > 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const done = (): void => resolve();
      this.readyWaiters.push(done);
      signal.addEventListener('abort', () => {
        this.readyWaiters = this.readyWaiters.filter((w) => w !== done);
        reject(new Error(`konnectivity agent reached no server (${this.addresses.map((a) => a.label).join(', ')})${this.lastError ? `: ${this.lastError}` : ''}`));
      }, { once: true });
    });
  }

  /** DRAIN every server (new dials go elsewhere), optionally let connections finish, then close. */
  async stop(opts: { drain?: boolean } = {}): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.state = 'stopping';
    clearTimeout(this.timer);
    for (const c of this.dialingConns) c.close('agent stopping');
    const conns = [...this.conns.values()];
    if (opts.drain ?? true) {
      await Promise.all(conns.map((c) => c.drain()));
      const deadline = Date.now() + this.o.drainTimeoutMs;
      while (Date.now() < deadline && conns.some((c) => c.targets.size > 0)) await new Promise((r) => setTimeout(r, 50));
    }
    await Promise.all(conns.map((c) => c.shutdown(opts.drain ?? true)));
    this.state = 'stopped';
    this.log.info({ agent: this.o.agentId }, 'konnectivity agent stopped');
  }

  status(): ComponentStatus {
    return {
      name: this.name,
      state: this.state === 'running' && this.conns.size === 0 ? 'restarting' : this.state,
      restarts: 0,
      lastError: this.lastError,
      uptimeSeconds: this.state === 'running' ? Math.floor((Date.now() - this.startedAt) / 1000) : undefined,
    };
  }

  snapshot(): AgentSnapshot {
    return {
      agentId: this.o.agentId,
      knownServerCount: this.knownServerCount,
      servers: [...this.conns.values()].map((c) => ({
        address: c.address.label,
        serverId: c.serverId,
        serverCount: c.serverCount,
        extensions: c.flowControl ? [FLOW_CONTROL_EXTENSION] : [],
        connections: c.targets.size,
        pendingDials: c.dials.size,
      })),
    };
  }

  /** Bytes of window growth the open target connections hold (0 once they are all closed). */
  windowGrowthInUse(): number {
    return this.windowBudget.used;
  }

  targetStats(): TargetStats[] {
    return [...this.conns.values()].flatMap((c) => [...c.targets.values()].map((t) => ({
      trace: t.trace, serverId: c.serverId, connectID: t.connectID,
      unflushed: t.flow.unflushed, peakUnflushed: t.flow.peakUnflushed, held: t.flow.heldLength, peakHeld: t.flow.peakHeld,
    })));
  }

  /** Prometheus text for the worker's metrics endpoint. */
  metricsText(): Promise<string> {
    return this.metrics.registry.metrics();
  }

  // ---- holding a stream to every server ----

  private tick(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.stopping) return;
    const now = Date.now();
    let next = Number.POSITIVE_INFINITY;
    for (const a of this.addresses) {
      if (a.dialing) continue;
      const needOwn = a.conns === 0 && !a.lastDuplicate;
      const needMore = this.conns.size < this.knownServerCount || (this.o.syncForever ?? false);
      if (!needOwn && !needMore) continue;
      if (now < a.nextAttemptAt) {
        next = Math.min(next, a.nextAttemptAt);
        continue;
      }
      void this.connectTo(a);
    }
    if (Number.isFinite(next)) this.timer = setTimeout(() => this.tick(), Math.max(0, next - now));
  }

  private retryLater(a: AddressState, grow: boolean): void {
    if (grow) a.backoffMs = Math.min(this.o.syncIntervalCapMs, a.backoffMs * 1.5);
    else a.backoffMs = this.o.syncIntervalMs;
    a.nextAttemptAt = Date.now() + Math.min(this.o.syncIntervalCapMs, jittered(a.backoffMs));
  }

  private async connectTo(a: AddressState): Promise<void> {
    a.dialing = true;
    const c = new ServerConnection(this, a);
    this.dialingConns.add(c);
    let outcome: 'new' | 'duplicate' | 'failed' = 'failed';
    try {
      await c.open();
      if (this.stopping) {
        c.close('agent stopping');
      } else if (this.conns.has(c.serverId)) {
        outcome = 'duplicate';
        this.log.debug({ address: a.label, serverId: c.serverId }, 'already connected to this server; dropping the duplicate');
        c.close('duplicate server');
      } else {
        outcome = 'new';
        this.conns.set(c.serverId, c);
        a.conns++;
        this.log.info({ address: a.label, serverId: c.serverId, serverCount: c.serverCount, extensions: c.flowControl ? [FLOW_CONTROL_EXTENSION] : [] }, 'connected to konnectivity server');
        if (this.state === 'starting') this.state = 'running';
        for (const w of this.readyWaiters.splice(0)) w();
      }
      this.knownServerCount = c.serverCount;
    } catch (err) {
      this.lastError = err instanceof Error ? err.message : String(err);
      if (!this.stopping) this.log.warn({ address: a.label }, `cannot connect to konnectivity server: ${this.lastError}`);
    } finally {
      this.dialingConns.delete(c);
      a.dialing = false;
    }
    a.lastDuplicate = outcome === 'duplicate';
    this.retryLater(a, outcome !== 'new');
    this.tick();
  }

  /** A held stream ended. */
  connectionLost(c: ServerConnection, why: string): void {
    if (this.conns.get(c.serverId) !== c) return;
    this.conns.delete(c.serverId);
    c.address.conns--;
    c.address.lastDuplicate = false;
    if (this.stopping) return;
    this.log.warn({ address: c.address.label, serverId: c.serverId }, `lost konnectivity server: ${why}`);
    this.retryLater(c.address, false);
    this.tick();
  }

  async tokenMetadata(): Promise<string | undefined> {
    if (!this.o.serviceAccountTokenPath) return undefined;
    const token = (await readFile(this.o.serviceAccountTokenPath, 'utf8')).trim();
    if (!token) throw new Error(`${this.o.serviceAccountTokenPath} is empty`);
    return `Bearer ${token}`;
  }

  get logger(): Logger {
    return this.log;
  }
}

/** One stream to one server: its dials and the target connections made for it. */
class ServerConnection {
  serverId = '';
  serverCount = 1;
  flowControl = false;
  readonly targets = new Map<Int64, Target>();
  readonly dials = new Map<Int64, PendingDial>();
  private client: grpc.Client | undefined;
  private call: grpc.ClientDuplexStream<Packet, Packet> | undefined;
  private nextConnectID = 1n;
  private blocked = false;
  private closed = false;
  private held = false;
  private lastReceived = Date.now();
  private pingTimer: NodeJS.Timeout | undefined;
  private readonly log: Logger;

  constructor(private readonly agent: KonnectivityAgent, readonly address: AddressState) {
    this.log = agent.logger;
  }

  /** Connects and waits for the server's headers. */
  async open(): Promise<void> {
    const o = this.agent.o;
    const buf = (v: string | Buffer | undefined): Buffer | null => (v === undefined ? null : typeof v === 'string' ? Buffer.from(v) : v);
    const creds = grpc.credentials.createSsl(buf(o.ca), buf(o.key), buf(o.cert));
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
    const md = new grpc.Metadata();
    md.set(META.agentId, o.agentId);
    md.set(META.agentIdentifiers, formatIdentifiers(o.identifiers ?? {}));
    const auth = await this.agent.tokenMetadata();
    if (auth) md.set(META.authorization, auth);
    if (o.extensions ?? true) md.set(META.extensions, FLOW_CONTROL_EXTENSION);
    if (this.closed) throw new Error('agent stopping');

    const client = new AgentServiceClient(this.address.label, creds, options);
    this.client = client;
    const call = client.Connect(md);
    this.call = call;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => fail(new Error(`no serverid/servercount headers within ${HEADER_TIMEOUT_MS / 1000} s`)), HEADER_TIMEOUT_MS);
      const fail = (err: Error): void => {
        clearTimeout(timer);
        call.off('metadata', onMetadata);
        this.close(err.message);
        reject(err);
      };
      const onError = (err: grpc.ServiceError): void => fail(new Error(err.details || err.message));
      const onEnd = (): void => fail(new Error('server closed the stream before sending its headers'));
      const onMetadata = (h: grpc.Metadata): void => {
        clearTimeout(timer);
        call.off('error', onError);
        call.off('end', onEnd);
        const ids = h.get(META.serverId).map(String);
        const counts = h.get(META.serverCount).map(String);
        if (ids.length !== 1 || !ids[0] || counts.length !== 1 || !/^[1-9][0-9]*$/.test(counts[0] ?? '')) {
          fail(new Error(`server must send exactly one ${META.serverId} and one ${META.serverCount} header (got ${ids.length} and ${counts.length})`));
          return;
        }
        this.serverId = ids[0];
        this.serverCount = Number(counts[0]);
        this.flowControl = (o.extensions ?? true) && offersFlowControl(h.get(META.extensions));
        resolve();
      };
      call.once('metadata', onMetadata);
      call.once('error', onError);
      call.once('end', onEnd);
    });

    call.on('data', (p: Packet) => this.onPacket(p));
    call.on('error', (err: grpc.ServiceError) => this.lost(err.details || err.message));
    call.on('end', () => this.lost('server ended the stream'));
    if (this.flowControl) {
      this.pingTimer = setInterval(() => this.keepalive(), Math.max(100, Math.floor(o.keepaliveTimeMs / 2)));
      this.pingTimer.unref();
    }
    this.held = true;
  }

  /** kctl servers only: ping when silent, give up when silent too long. */
  private keepalive(): void {
    const silent = Date.now() - this.lastReceived;
    const o = this.agent.o;
    if (silent >= o.keepaliveTimeMs + o.keepaliveTimeoutMs) {
      this.lost(`no answer for ${Math.round(silent / 1000)} s`);
    } else if (silent >= o.keepaliveTimeMs) {
      this.send(packets.ping(newRandom()));
    }
  }

  send(p: Packet): void {
    if (this.closed || !this.call) return;
    if (!this.call.write(p) && !this.blocked) {
      this.blocked = true;
      this.call.once('drain', () => {
        this.blocked = false;
        for (const t of this.targets.values()) t.maybeResume();
      });
    }
  }

  get writable(): boolean {
    return !this.blocked && !this.closed;
  }

  private onPacket(p: Packet): void {
    this.lastReceived = Date.now();
    switch (p.type) {
      case 'DIAL_REQ': return this.onDial(p);
      case 'DATA': {
        const d = p.data;
        if (!d) return;
        const t = this.targets.get(d.connectID);
        if (!t) {
          if (isId(d.connectID)) this.send(packets.closeRsp(d.connectID, `unknown connectID ${d.connectID}`));
          return;
        }
        t.fromServer(d.data);
        return;
      }
      case 'CLOSE_REQ': {
        const id = p.closeRequest?.connectID ?? '0';
        const t = this.targets.get(id);
        if (!t) {
          this.send(packets.closeRsp(id, `unknown connectID ${id}`));
          return;
        }
        t.closeByServer();
        return;
      }
      case 'DIAL_CLS': {
        const d = this.dials.get(p.closeDial?.random ?? '');
        if (d) d.cancel();
        return;
      }
      case 'KCTL_CREDIT': {
        const c = p.kctlCredit;
        if (c && this.flowControl) this.targets.get(c.connectID)?.grant(Number(c.bytes));
        return;
      }
      case 'KCTL_PING':
        if (this.flowControl) this.send(packets.pong(p.kctlPing?.nonce ?? '0'));
        return;
      case 'KCTL_PONG':
        return;
      default:
        this.log.debug({ serverId: this.serverId, ...describePacket(p) }, 'ignoring unexpected packet from server');
    }
  }

  private onDial(p: Packet): void {
    const req = p.dialRequest;
    if (!req) return;
    const trace = req.kctlTraceID || newTraceId();
    const fields = { trace, serverId: this.serverId, random: req.random, address: req.address };
    if (!isId(req.random) || this.dials.has(req.random)) {
      this.send(packets.dialRsp(req.random, '0', `invalid or duplicate dial id ${req.random}`));
      return;
    }
    const target = splitHostPort(req.address);
    if (req.protocol !== 'tcp' || !target) {
      this.send(packets.dialRsp(req.random, '0', `cannot dial ${req.protocol} ${req.address}: only tcp host:port`));
      return;
    }
    this.log.debug(fields, 'dialing target');
    const d = new PendingDial(this, req.random, req.address, target.host, target.port, trace);
    this.dials.set(req.random, d);
    d.start();
  }

  /** PendingDial callback: the target answered. */
  dialed(d: PendingDial, socket: Socket): void {
    this.dials.delete(d.random);
    const connectID = String(this.nextConnectID++);
    const t = new Target(this, socket, connectID, d.trace, d.address);
    this.targets.set(connectID, t);
    this.agent.metrics.dialDuration.observe((Date.now() - d.startedAt) / 1000);
    this.send(packets.dialRsp(d.random, connectID));
    this.log.debug({ trace: d.trace, serverId: this.serverId, random: d.random, connectID, address: d.address }, 'target connected');
    t.start();
  }

  dialFailed(d: PendingDial, error: string, reason: string): void {
    this.dials.delete(d.random);
    this.agent.metrics.dialFailures.inc({ reason });
    this.log.warn({ trace: d.trace, serverId: this.serverId, random: d.random, address: d.address }, `target dial failed: ${error}`);
    this.send(packets.dialRsp(d.random, '0', error));
  }

  dialCancelled(d: PendingDial): void {
    this.dials.delete(d.random);
    this.agent.metrics.dialFailures.inc({ reason: 'cancelled' });
    this.log.debug({ trace: d.trace, serverId: this.serverId, random: d.random }, 'dial cancelled by server');
  }

  targetGone(t: Target): void {
    if (this.targets.get(t.connectID) === t) this.targets.delete(t.connectID);
  }

  get agentLog(): Logger {
    return this.log;
  }

  get options(): KonnectivityAgent['o'] {
    return this.agent.o;
  }

  get windowBudget(): WindowBudget {
    return this.agent.windowBudget;
  }

  private lost(why: string): void {
    if (this.closed) return;
    this.close(why);
    if (this.held) this.agent.connectionLost(this, why);
  }

  /** DRAIN: the server should send new dials to other agents. */
  drain(): Promise<void> {
    return new Promise((resolve) => {
      if (this.closed || !this.call) return resolve();
      const t = setTimeout(resolve, 1_000);
      this.call.write(packets.drain(), () => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  /** Ends the stream (politely when asked) and everything on it. */
  async shutdown(polite: boolean): Promise<void> {
    const call = this.call;
    if (polite && call && !this.closed) {
      // Half-close and give the server a moment to answer with its status.
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 1_000);
        call.once('status', () => {
          clearTimeout(t);
          resolve();
        });
        call.end();
      });
    }
    this.close('agent stopping');
  }

  close(why: string): void {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.pingTimer);
    for (const d of [...this.dials.values()]) d.abandon();
    this.dials.clear();
    for (const t of [...this.targets.values()]) t.destroy();
    this.targets.clear();
    this.call?.cancel();
    this.client?.close();
    this.log.debug({ serverId: this.serverId || undefined, address: this.address.label, why }, 'server stream closed');
  }
}

class PendingDial {
  readonly startedAt = Date.now();
  private socket: Socket | undefined;
  private timer: NodeJS.Timeout | undefined;
  private settled = false;

  constructor(
    private readonly conn: ServerConnection,
    readonly random: Int64,
    readonly address: string,
    private readonly host: string,
    private readonly port: number,
    readonly trace: string,
  ) {}

  start(): void {
    const socket = netConnect({ host: this.host, port: this.port });
    this.socket = socket;
    this.timer = setTimeout(() => {
      if (this.settle()) this.conn.dialFailed(this, `dial tcp ${this.address}: i/o timeout`, 'timeout');
    }, this.conn.options.dialTimeoutMs);
    socket.once('connect', () => {
      if (!this.settle(false)) return;
      this.conn.dialed(this, socket);
    });
    socket.once('error', (err: NodeJS.ErrnoException) => {
      if (this.settle()) this.conn.dialFailed(this, dialErrorText(this.address, this.host, err), err.code === 'EMFILE' ? 'fd_exhausted' : 'error');
    });
  }

  /** Marks the dial done; destroys the socket unless it is handed on. */
  private settle(destroy = true): boolean {
    if (this.settled) return false;
    this.settled = true;
    clearTimeout(this.timer);
    if (destroy) this.socket?.destroy();
    return true;
  }

  cancel(): void {
    if (this.settle()) this.conn.dialCancelled(this);
  }

  abandon(): void {
    this.settle();
  }
}

/** One connection to a target, tunneled to the server under `connectID`. */
class Target {
  readonly flow: ConnectionFlow;
  private paused = false;
  private ended = false;
  private closed = false;
  private closeTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly conn: ServerConnection,
    private readonly socket: Socket,
    readonly connectID: Int64,
    readonly trace: string,
    private readonly address: string,
  ) {
    this.flow = new ConnectionFlow({ negotiated: conn.flowControl, window: INITIAL_WINDOW, maxWindow: MAX_WINDOW, budget: conn.windowBudget, bufferLimit: conn.options.upstreamBufferLimit });
  }

  start(): void {
    const s = this.socket;
    s.setNoDelay(true);
    s.on('data', (buf: Buffer) => this.fromTarget(buf));
    s.on('end', () => {
      this.ended = true;
      if (this.flow.heldLength === 0) this.finish();
    });
    s.on('error', (err: NodeJS.ErrnoException) => this.finish(ERROR_TEXT[err.code ?? ''] ?? err.message));
    s.on('close', () => {
      // Ended with bytes still waiting for credit: finish once they are sent (grant).
      if (this.ended && this.flow.heldLength > 0) return;
      this.finish(this.ended ? undefined : 'connection closed');
    });
  }

  private fromTarget(buf: Buffer): void {
    for (let off = 0; off < buf.length; off += MAX_DATA_CHUNK) {
      const part = this.flow.take(buf.length <= MAX_DATA_CHUNK ? buf : buf.subarray(off, off + MAX_DATA_CHUNK));
      if (part) this.conn.send(packets.data(this.connectID, part));
    }
    if (!this.paused && (!this.flow.open || !this.conn.writable)) {
      this.paused = true;
      this.socket.pause();
    }
  }

  maybeResume(): void {
    if (this.paused && !this.closed && this.flow.open && this.conn.writable) {
      this.paused = false;
      this.socket.resume();
    }
  }

  grant(bytes: number): void {
    if (this.closed) return;
    for (const part of this.flow.grant(bytes)) this.conn.send(packets.data(this.connectID, part));
    if (this.ended && this.flow.heldLength === 0) this.finish();
    else this.maybeResume();
  }

  fromServer(buf: Buffer): void {
    if (this.closed || buf.length === 0) return;
    const len = buf.length;
    if (!this.flow.received(len)) {
      this.conn.agentLog.warn({ trace: this.trace, serverId: this.conn.serverId, connectID: this.connectID, buffered: this.flow.unflushed }, 'target is not reading; closing this connection to protect the others');
      this.finish(`target is not reading: more than ${this.flow.opts.bufferLimit} bytes buffered for this connection`);
      return;
    }
    this.socket.write(buf, () => {
      const grant = this.flow.flushed(len);
      if (grant > 0 && !this.closed) this.conn.send(packets.credit(this.connectID, grant));
    });
  }

  /** CLOSE_REQ: close the target, confirm with CLOSE_RSP. */
  closeByServer(): void {
    if (this.closed) return;
    this.conn.agentLog.debug({ trace: this.trace, serverId: this.conn.serverId, connectID: this.connectID }, 'closing target on request');
    this.markClosed();
    this.conn.send(packets.closeRsp(this.connectID));
    // Let written bytes reach the target, but do not wait on a target that stopped reading.
    this.socket.end();
    this.closeTimer = setTimeout(() => this.socket.destroy(), 2_000);
    this.closeTimer.unref();
    this.socket.once('close', () => clearTimeout(this.closeTimer));
  }

  /** The target closed (or failed): tell the server. */
  private finish(error?: string): void {
    if (this.closed) return;
    this.conn.agentLog.debug({ trace: this.trace, serverId: this.conn.serverId, connectID: this.connectID, address: this.address, error }, 'target closed');
    this.markClosed();
    this.conn.send(packets.closeRsp(this.connectID, error));
    this.socket.destroy();
  }

  destroy(): void {
    this.markClosed();
    this.socket.destroy();
  }

  private markClosed(): void {
    this.closed = true;
    this.flow.release();
    this.conn.targetGone(this);
  }
}
