// The konnectivity agent, in the worker process (and behind `kctl konnectivity-agent`). It
// dials OUT to every konnectivity server and carries the connections kube-apiserver asks
// for (kubelet logs/exec/port-forward, webhooks, aggregated APIs) to targets on this side.
//
// - HA without a load balancer: it holds a stream to every listed server address (to as many
//   servers as an address is listed: the pods of a hosted cluster share one), and like
//   upstream it also discovers servers behind one address: each server tells its serverid
//   and servercount, and the agent dials until it holds servercount distinct servers
//   (duplicates dropped, backoff 1 s x1.5 capped at 10 s, each wait drawn from
//   [b/2, b] so agents never retry in lockstep).
// - With a kctl server (kctl-extensions: flow-control/1 answered), per-connection credit
//   windows, trace ids from the server, and app-level pings that notice a dead server in
//   seconds. With an upstream server, none of that: plain protocol, gRPC keepalive no more
//   often than upstream's 30 s enforcement floor.
//
// This file is the agent as a whole (which servers to hold, start/stop, snapshot);
// connection.ts is one stream to one server, targets.ts the target side.
import { joinHostPort } from '../../base/addresses.ts';
import { addressState, listedAddresses, retryLater, type AddressState } from './addresses.ts';
import type { Logger } from '../../base/log.ts';
import type { Component, ComponentState, ComponentStatus } from '../../base/component.ts';
import { ServerConnection, type ConnectionContext } from './connection.ts';
import { WindowBudget } from '../wire/flow.ts';
import { AgentMetrics } from './metrics.ts';
import {
  AGENT_DEFAULTS,
  type AgentOptionsWithDefaults,
  type KonnectivityAgentOptions,
  type ServerAddress,
} from './options.ts';
import {
  serverSnapshots,
  targetStatsOf,
  type AgentServerSnapshot,
  type AgentSnapshot,
  type TargetStats,
} from './snapshot.ts';
import { WINDOW_GROWTH_BUDGET, packets } from '../wire/protocol.ts';
import { messageOf } from '../../base/errors.ts';
import { definedOnly } from '../../base/defined.ts';

export type { KonnectivityAgentOptions, ServerAddress };
export type { AgentServerSnapshot, AgentSnapshot, TargetStats };

export class KonnectivityAgent implements Component {
  readonly name = 'konnectivity-agent';
  readonly metrics: AgentMetrics;
  private readonly log: Logger;
  private addresses: AddressState[];
  /** Live streams by serverID: at most one per server. */
  private readonly conns = new Map<string, ServerConnection>();
  private readonly dialingConns = new Set<ServerConnection>();
  private knownServerCount = 1;
  private timer: NodeJS.Timeout | undefined;
  private state: ComponentState = 'pending';
  private stopping = false;
  private isDraining = false;
  private counterTimer: NodeJS.Timeout | undefined;
  private startedAt = 0;
  private lastError: string | undefined;
  private readyWaiters: (() => void)[] = [];
  /** What every server connection shares: options, log, metrics, the window budget. */
  private readonly context: ConnectionContext;
  /** Options with defaults applied. */
  private readonly o: AgentOptionsWithDefaults;

  constructor(opts: KonnectivityAgentOptions) {
    if (opts.servers.length === 0) throw new Error('konnectivity agent needs at least one server address');
    if (!opts.cert !== !opts.key)
      throw new Error('konnectivity agent needs both a client certificate and its key, or neither');
    if (!opts.cert && !opts.serviceAccountTokenPath)
      throw new Error('konnectivity agent needs a client certificate or a service-account token path');
    this.o = {
      ...AGENT_DEFAULTS,
      // An option given as undefined keeps its default.
      ...definedOnly(opts),
    };
    this.log = opts.log;
    this.addresses = [...listedAddresses(opts.servers).values()].map(({ addr, behind }) =>
      addressState(addr, behind, this.o.syncIntervalMs),
    );
    this.metrics = new AgentMetrics({
      openServerConnections: () => this.conns.size,
      knownServerCount: () => this.serverCount(),
      openEndpointConnections: () => {
        let n = 0;
        for (const c of this.conns.values()) n += c.targets.size;
        return n;
      },
    });
    this.context = {
      options: this.o,
      log: this.log,
      metrics: this.metrics,
      windowBudget: new WindowBudget(WINDOW_GROWTH_BUDGET),
      draining: () => this.isDraining,
      datagram: (fromNode, data) => this.o.onDatagram?.(fromNode, data),
    };
  }

  /** A renewed client certificate and key (kubelet rotated its own): used for every connection made from now on. */
  setClientCertificate(cert: string | Buffer, key: string | Buffer): void {
    this.o.cert = cert;
    this.o.key = key;
  }

  /** The CA bundle servers are verified with, for the connections made from now on (a CA rotation). */
  setTrust(ca: string | Buffer): void {
    this.o.ca = ca;
  }

  /** The servers' addresses now (HA: they follow the live controllers). New ones are dialed at once; dropped ones drain and close. */
  setServers(servers: ServerAddress[]): void {
    if (servers.length === 0) return; // keep what we have rather than hold nothing
    const listed = listedAddresses(servers);
    const added = [...listed].filter(([label]) => !this.addresses.some((x) => x.label === label)).map(([, a]) => a);
    // A server that left from behind a shared address: its stream ends with it; no other is dropped.
    for (const a of this.addresses) a.behind = listed.get(a.label)?.behind ?? a.behind;
    for (const a of this.addresses.filter((x) => !listed.has(x.label))) {
      a.removed = true;
      for (const c of [...this.conns.values()].filter((x) => x.address === a.label)) {
        this.log.info(
          { address: a.label, serverId: c.serverId },
          'konnectivity server left the cluster; draining its stream',
        );
        void c.drain().then(() => c.shutdown(true));
      }
    }
    this.addresses = [
      ...this.addresses.filter((x) => !x.removed),
      ...added.map(({ addr, behind }) => addressState(addr, behind, this.o.syncIntervalMs)),
    ];
    if (added.length)
      this.log.info(
        { added: added.map(({ addr }) => joinHostPort(addr.host, addr.port)) },
        'konnectivity servers joined the cluster',
      );
    this.tick();
  }

  async init(): Promise<void> {}

  async start(): Promise<void> {
    this.state = 'starting';
    this.startedAt = Date.now();
    // A count from elsewhere (leases) changes without any event here: look again every sync interval.
    if (this.o.serverCounter)
      this.counterTimer = setInterval(() => this.timer === undefined && this.tick(), this.o.syncIntervalMs);
    this.tick();
  }

  /** Resolves once the agent holds a stream to at least one server. */
  ready(signal: AbortSignal): Promise<void> {
    if (this.conns.size > 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const done = (): void => resolve();
      this.readyWaiters.push(done);
      signal.addEventListener(
        'abort',
        () => {
          this.readyWaiters = this.readyWaiters.filter((w) => w !== done);
          reject(
            new Error(
              `konnectivity agent reached no server (${this.addresses.map((a) => a.label).join(', ')})${this.lastError ? `: ${this.lastError}` : ''}`,
            ),
          );
        },
        { once: true },
      );
    });
  }

  /**
   * Tells every server (and any it connects to later) that this agent is draining, and refuses
   * new dials; established connections keep working and the streams stay up. Upstream's agent
   * does this on its first SIGTERM, and rollouts rely on it.
   */
  async drain(): Promise<void> {
    if (this.isDraining) return;
    this.isDraining = true;
    this.log.info(
      { servers: this.conns.size },
      'draining: new dials go to other agents, open connections keep working',
    );
    await Promise.all([...this.conns.values()].map((c) => c.drain()));
  }

  get draining(): boolean {
    return this.isDraining;
  }

  /**
   * A datagram for another node, through a kctl server that relays them (one stream is enough:
   * every node holds one to every server). False when no stream can take it now: lost, as
   * datagrams may be.
   */
  sendDatagram(toNode: string, data: Buffer): boolean {
    for (const c of this.conns.values())
      if (c.flowControl && c.writable) {
        c.send(packets.datagram(toNode, data));
        return true;
      }
    return false;
  }

  /** DRAIN every server (new dials go elsewhere), optionally let connections finish, then close. */
  async stop(opts: { drain?: boolean } = {}): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.state = 'stopping';
    clearTimeout(this.timer);
    clearInterval(this.counterTimer);
    for (const c of this.dialingConns) c.close('agent stopping');
    const conns = [...this.conns.values()];
    if (opts.drain ?? true) {
      await Promise.all(conns.map((c) => c.drain()));
      const deadline = Date.now() + this.o.drainTimeoutMs;
      while (Date.now() < deadline && conns.some((c) => c.targets.size > 0))
        await new Promise((r) => setTimeout(r, 50));
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
      servers: serverSnapshots(this.conns.values()),
    };
  }

  /** Bytes of window growth the open target connections hold (0 once they are all closed). */
  windowGrowthInUse(): number {
    return this.context.windowBudget.used;
  }

  targetStats(): TargetStats[] {
    return targetStatsOf(this.conns.values());
  }

  /** Prometheus text for the worker's metrics endpoint. */
  metricsText(): Promise<string> {
    return this.metrics.registry.metrics();
  }

  // ---- holding a stream to every server ----

  private tick(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    // Like upstream's agent: no new server connections once draining.
    if (this.stopping || this.isDraining) return;
    const now = Date.now();
    let next = Number.POSITIVE_INFINITY;
    for (const a of this.addresses) {
      if (a.dialing) continue;
      // Its own servers: one, or as many as are listed here; none when the one it reached is held through another address.
      const needOwn = a.conns < a.behind && !(a.conns === 0 && a.lastDuplicate);
      const needMore = this.conns.size < this.serverCount() || (this.o.syncForever ?? false);
      if (!needOwn && !needMore) continue;
      if (now < a.nextAttemptAt) {
        next = Math.min(next, a.nextAttemptAt);
        continue;
      }
      void this.connectTo(a);
    }
    if (Number.isFinite(next)) this.timer = setTimeout(() => this.tick(), Math.max(0, next - now));
  }

  /** How many servers to hold: what they say, or what the other counter says (upstream's aggregate counter). */
  serverCount(): number {
    const fromResponses = this.knownServerCount;
    const other = this.o.serverCounter;
    if (!other) return fromResponses;
    const n = this.o.serverCountSource === 'max' ? Math.max(other.count(), fromResponses) : other.count();
    return Math.max(1, n);
  }

  /**
   * Something else on this host just reached `host` (the worker's API balancer: a controller
   * answers again after a partition). A server there we hold no stream to is dialed within
   * 0.2 s instead of at its backoff's next turn, which may be 10 s away.
   */
  retrySoon(host: string): void {
    let due = false;
    for (const a of this.addresses) {
      if (a.addr.host !== host || a.conns >= a.behind || a.dialing || a.removed) continue;
      a.backoffMs = this.o.syncIntervalMs;
      // Little jitter: each worker's balancer checks on its own clock, which already spreads a site's agents.
      a.nextAttemptAt = Math.min(a.nextAttemptAt, Date.now() + Math.round(Math.random() * 200));
      due = true;
    }
    if (due) this.tick();
  }

  private async connectTo(a: AddressState): Promise<void> {
    a.dialing = true;
    const lost = (why: string): void => this.connectionLost(c, a, why);
    const c: ServerConnection = new ServerConnection(this.context, a.label, lost, a.addr.serverName);
    this.dialingConns.add(c);
    let outcome: 'new' | 'duplicate' | 'failed' = 'failed';
    try {
      await c.open();
      if (this.stopping || a.removed) {
        c.close(this.stopping ? 'agent stopping' : 'server left the cluster');
      } else if (this.conns.has(c.serverId)) {
        outcome = 'duplicate';
        this.log.debug(
          { address: a.label, serverId: c.serverId },
          'already connected to this server; dropping the duplicate',
        );
        c.close('duplicate server');
      } else {
        outcome = 'new';
        this.conns.set(c.serverId, c);
        a.conns++;
        this.log.info(
          {
            address: a.label,
            serverId: c.serverId,
            serverCount: c.serverCount,
            transport: c.transport,
            extensions: c.extensions,
          },
          'connected to konnectivity server',
        );
        if (this.state === 'starting') this.state = 'running';
        for (const w of this.readyWaiters.splice(0)) w();
        if (this.isDraining) void c.drain();
      }
      this.knownServerCount = c.serverCount;
    } catch (err) {
      this.lastError = messageOf(err);
      if (!this.stopping)
        this.log.warn({ address: a.label }, `cannot connect to konnectivity server: ${this.lastError}`);
    } finally {
      this.dialingConns.delete(c);
      a.dialing = false;
    }
    a.lastDuplicate = outcome === 'duplicate';
    retryLater(a, outcome !== 'new', this.o);
    this.tick();
  }

  /** A held stream ended. */
  private connectionLost(c: ServerConnection, a: AddressState, why: string): void {
    if (this.conns.get(c.serverId) !== c) return;
    this.conns.delete(c.serverId);
    a.conns--;
    a.lastDuplicate = false;
    if (this.stopping || a.removed) return;
    this.log.warn({ address: a.label, serverId: c.serverId }, `lost konnectivity server: ${why}`);
    retryLater(a, false, this.o);
    this.tick();
  }
}
