// The konnectivity server, in the controller process or standalone (kctl konnectivity-server):
// kube-apiserver dials through it (GRPC or HTTP-CONNECT, on a unix socket or on mutual-TLS TCP),
// agents connect to it (TLS on agentPort; each stream is agent-streams.ts's), and the broker ties
// the two together. Admin HTTP (healthz, readyz, metrics) on loopback.
import { X509Certificate, randomUUID } from 'node:crypto';
import type { Server as HttpServer } from 'node:http';
import { dirname } from 'node:path';
import type { TLSSocket } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { splitCertificates } from '../../base/pem.ts';
import { joinHostPort } from '../../base/addresses.ts';
import { mkdirShared } from '../../base/fs.ts';
import type { Logger } from '../../base/log.ts';
import type { Component, ComponentStatus, ComponentState } from '../../base/component.ts';
import { listenAdmin } from './admin.ts';
import { closeHttp, shutdownGrpc } from './listen.ts';
import { AgentListener } from './agent-port.ts';
import { AgentStreams } from './agent-streams.ts';
import { strayAgentId } from './auth.ts';
import { DatagramRelay } from './datagrams.ts';
import { Broker } from './broker.ts';
import { FrontendListeners, type TcpFrontend } from './frontend-listeners.ts';
import { withServerDefaults, type KonnectivityServerOptions, type ServerOptionsWithDefaults } from './options.ts';
import type { AgentSnapshot, KonnectivityServerSnapshot, TunnelStats } from './snapshot.ts';
import { ServerMetrics } from './metrics.ts';
import { LinkAgentCall, peerOf, type LinkKeepalive } from '../wire/link-calls.ts';
import { AgentServiceDefinition, type Packet } from '../wire/protocol.ts';
import { messageOf } from '../../base/errors.ts';
import type { Socket } from 'node:net';

export const CONNECT_METHOD = AgentServiceDefinition.Connect.path;
export type { KonnectivityServerOptions, TcpFrontend };
export type { AgentSnapshot, KonnectivityServerSnapshot, TunnelStats };

const buf = (v: string | Buffer): Buffer => (typeof v === 'string' ? Buffer.from(v) : v);

/** Every certificate of a PEM trust bundle; throws naming the problem when there is none. */
function certificatesOf(pem: string | Buffer): X509Certificate[] {
  const certs = splitCertificates(String(pem)).map((c) => new X509Certificate(c));
  if (certs.length === 0) throw new Error('konnectivity server: tls.ca holds no certificate');
  return certs;
}

export class KonnectivityServer implements Component {
  readonly name = 'konnectivity';
  readonly serverId: string;
  readonly metrics: ServerMetrics;
  private readonly broker: Broker;
  private readonly agentStreams: AgentStreams;
  private readonly log: Logger;
  /** The cluster CAs agents' certificates are checked against: the trust bundle's, as it is now. */
  private cas: X509Certificate[] | undefined;
  /** The trust bundle handshakes verify client certificates with (tls.ca, or the last setTls's). */
  private caPem: string | Buffer | undefined;
  private state: ComponentState = 'pending';
  private lastError: string | undefined;
  private startedAt = 0;
  private frontends: FrontendListeners | undefined;
  private agentServer: grpc.Server | undefined;
  private agentListener: AgentListener | undefined;
  private adminServer: HttpServer | undefined;
  private boundAgentPort = 0;
  private boundAdminPort = 0;
  private started: Promise<void> | undefined;
  private unwatchNodes: (() => void) | undefined;

  /** Options with SERVER_DEFAULTS applied. */
  private readonly o: ServerOptionsWithDefaults;

  constructor(options: KonnectivityServerOptions) {
    const o = (this.o = withServerDefaults(options));
    this.serverId = o.serverId ?? randomUUID();
    this.log = o.log;
    this.cas = o.tls.ca === undefined ? undefined : certificatesOf(o.tls.ca);
    this.caPem = o.tls.ca;
    if (!this.cas && o.agentAuth === 'nodes')
      throw new Error('konnectivity server: tls.ca is needed to check node certificates');
    this.metrics = new ServerMetrics({
      readyBackends: () => this.broker.agents.size,
      readyBackendsByStrategy: () => this.broker.agentsByStrategy(),
      pendingDials: () => this.broker.pendingByRandom.size + this.broker.dials.size,
      establishedConnections: () => this.broker.establishedCount(),
    });
    this.broker = new Broker({
      serverId: this.serverId,
      strategies: o.proxyStrategies,
      dialTimeoutMs: o.dialTimeoutMs,
      closeTimeoutMs: o.closeTimeoutMs,
      upstreamBufferLimit: o.upstreamBufferLimit,
      metrics: this.metrics,
      log: this.log,
      dialWait: o.dialWait,
      datagrams: o.datagramRelay
        ? new DatagramRelay({
            ...o.datagramRelay,
            agents: () => this.broker.agents,
            log: this.log,
            counted: (outcome, bytes) => this.metrics.relayed(outcome, bytes),
          })
        : undefined,
    });
    this.agentStreams = new AgentStreams({
      options: o,
      cas: () => this.cas,
      serverId: this.serverId,
      serverCount: () => this.serverCount(),
      broker: this.broker,
      metrics: this.metrics,
      log: this.log,
      authenticated: (peer) => this.agentListener?.authenticated(peer),
    });
  }

  async init(): Promise<void> {
    for (const p of [this.o.udsPath, this.o.httpConnectUdsPath]) {
      if (p) await mkdirShared(dirname(p)); // the socket's own mode says who may connect
    }
  }

  start(): Promise<void> {
    this.started ??= this.listen().then(
      () => {
        this.state = 'running';
        this.startedAt = Date.now();
      },
      async (err: unknown) => {
        await this.closeListeners(); // what did bind must not linger (e.g. agent port taken)
        this.state = 'failed';
        this.lastError = messageOf(err);
        throw err;
      },
    );
    this.state = 'starting';
    return this.started;
  }

  /** Ready once every listener is up: kube-apiserver may start then, agents come and go. */
  async ready(signal: AbortSignal): Promise<void> {
    if (!this.started) throw new Error('konnectivity server was not started');
    await Promise.race([
      this.started,
      new Promise((_, reject) =>
        signal.addEventListener('abort', () => reject(new Error('konnectivity server did not start in time')), {
          once: true,
        }),
      ),
    ]);
  }

  private async listen(): Promise<void> {
    this.frontends = new FrontendListeners(
      {
        udsPath: this.o.udsPath,
        httpConnectUdsPath: this.o.httpConnectUdsPath,
        udsMode: this.o.udsMode,
        replaceSockets: this.o.replaceSockets,
        tcp: this.o.tcpFrontend,
        closeGraceMs: this.o.closeTimeoutMs,
      },
      this.broker,
      this.metrics,
      this.log,
    );
    await this.frontends.listen();
    const tcp = this.o.tcpFrontend;

    // Backend: agents over TLS (agent-port.ts). The client certificate is requested but not required by TLS,
    // so token-only agents get through the handshake; agent-streams.ts then requires one.
    const agents = new grpc.Server({
      'grpc.enable_channelz': 0,
      'grpc.keepalive_time_ms': this.keepalive.timeMs,
      'grpc.keepalive_timeout_ms': this.keepalive.timeoutMs,
      'grpc.keepalive_permit_without_calls': 1,
      'grpc.max_receive_message_length': 16 * 1024 * 1024,
    });
    agents.addService(AgentServiceDefinition, {
      Connect: (call: grpc.ServerDuplexStream<Packet, Packet>) => void this.agentStreams.connect(call),
    });
    this.agentServer = agents;
    const upstreamAuth = this.o.agentAuth === 'upstream';
    const listener = new AgentListener(
      agents,
      {
        ca: this.caPem === undefined ? undefined : buf(this.caPem),
        cert: buf(this.o.tls.cert),
        key: buf(this.o.tls.key),
        // As upstream: a CA means a verified client certificate is required, unless tokens authenticate.
        requireClientCert: upstreamAuth && this.o.tls.ca !== undefined && !this.o.tokenReview,
      },
      {
        limits: { maxConnections: this.o.maxUnauthenticatedAgents, timeoutMs: this.o.agentAuthTimeoutMs },
        log: this.log,
      },
      this.o.extensions ? (socket) => this.onLink(socket) : undefined,
    );
    this.agentListener = listener;
    this.boundAgentPort = await listener.listen(this.o.agentPort, this.o.agentBindAddress);

    if (this.o.adminPort !== undefined) {
      const admin = await listenAdmin(this.o.adminPort, this.o.adminBindAddress, {
        hasAgents: () => this.broker.agents.size > 0,
        registry: this.metrics.registry,
      });
      this.adminServer = admin.server;
      this.boundAdminPort = admin.port;
    }
    this.unwatchNodes = this.o.nodes?.onChange(() => this.agentStreams.rejudge('all'));
    this.log.info(
      {
        serverId: this.serverId,
        uds: this.o.udsPath,
        httpConnect: this.o.httpConnectUdsPath,
        tcpFrontend: tcp ? `${tcp.mode} ${joinHostPort(tcp.host, tcp.port)}` : undefined,
        agentPort: this.boundAgentPort,
        adminPort: this.o.adminPort === undefined ? undefined : this.boundAdminPort,
      },
      'konnectivity server listening',
    );
  }

  /** How long an agent may be silent before it is pinged, and then before it is dropped (both transports). */
  private get keepalive(): LinkKeepalive {
    return { timeMs: this.o.keepaliveTimeMs, timeoutMs: this.o.keepaliveTimeoutMs };
  }

  /** A kctl agent chose kctl-tunnel/1: its HELLO carries what gRPC metadata would. */
  private onLink(socket: TLSSocket): void {
    LinkAgentCall.accept(socket, this.keepalive).then(
      (call) => void this.agentStreams.connect(call),
      (err: Error) => {
        // A connection the agent port's pre-auth bounds closed was logged there, once per burst.
        if (!this.agentListener?.closedBeforeAuth(socket))
          this.log.warn({ peer: peerOf(socket) }, `agent connection dropped: ${err.message}`);
      },
    );
  }

  private serverCount(): number {
    const n = this.o.serverCount?.() ?? 1;
    return Number.isInteger(n) && n > 0 ? n : 1;
  }

  /**
   * Upstream's readiness: an agent the first proxy strategy can pick (with destHost first, one
   * that claims a name or address). Null when ready, else why not.
   */
  notReadyReason(): string | null {
    // The broker's map is in strategy order: its first entry is the first strategy's.
    const [first = 0] = this.broker.agentsByStrategy().values();
    return first > 0 ? null : 'no connection to any proxy agent';
  }

  /** An agent's connection handed on by the host's front door, from `client` (its address). */
  acceptFromDoor(socket: Socket, client: string): void {
    if (this.agentListener) this.agentListener.handOff(socket, client);
    else socket.destroy();
  }

  /** The agent port actually bound (useful with agentPort 0). */
  agentPort(): number {
    return this.boundAgentPort;
  }

  adminPort(): number {
    return this.boundAdminPort;
  }

  /**
   * Stops taking new frontend connections and waits, at most `timeoutMs`, for the open ones to
   * end (upstream's --graceful-shutdown-timeout); then stops.
   */
  async stopGracefully(timeoutMs: number): Promise<void> {
    const frontendsDone = this.frontends?.drained() ?? Promise.resolve();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      frontendsDone.then(() => false),
      new Promise<boolean>((r) => (timer = setTimeout(() => r(true), timeoutMs))),
    ]);
    clearTimeout(timer);
    if (timedOut)
      this.log.warn(
        { timeoutMs, open: this.broker.establishedCount() },
        'graceful shutdown timed out; closing the open connections',
      );
    await this.stop();
  }

  async stop(): Promise<void> {
    if (this.state === 'stopped') return;
    this.state = 'stopping';
    await this.started?.catch(() => undefined); // a start in flight binds the rest of its listeners first
    await this.closeListeners();
    this.state = 'stopped';
    this.log.info({ serverId: this.serverId }, 'konnectivity server stopped');
  }

  private async closeListeners(): Promise<void> {
    this.unwatchNodes?.();
    this.unwatchNodes = undefined;
    this.broker.shutdown();
    this.agentListener?.close();
    await Promise.all([shutdownGrpc(this.agentServer), this.frontends?.close(), closeHttp(this.adminServer)]);
    this.agentListener?.destroySockets();
    this.agentServer = this.adminServer = this.agentListener = this.frontends = undefined;
  }

  /** A renewed serving certificate and key: new agent handshakes get them, open tunnels stay. */
  /**
   * A renewed certificate and key for new handshakes; with `ca`, a new trust bundle (a CA
   * rotation's phase): new handshakes verify against it, and agents whose certificate no CA of it
   * issued are cut off at once (a dropped CA's certificates stop working now, not at a restart).
   */
  setTls(tls: { cert: string | Buffer; key: string | Buffer; ca?: string | Buffer }): void {
    if (tls.ca !== undefined) {
      if (this.cas) this.cas = certificatesOf(tls.ca);
      this.caPem = tls.ca;
    }
    const ca = this.caPem;
    this.agentListener?.setCredentials({
      ca: ca === undefined ? undefined : buf(ca),
      cert: buf(tls.cert),
      key: buf(tls.key),
    });
    if (tls.ca !== undefined && this.cas) this.agentStreams.trustChanged(this.cas);
  }

  status(): ComponentStatus {
    return {
      name: this.name,
      state: this.state,
      restarts: 0,
      lastError: this.lastError,
      uptimeSeconds: this.state === 'running' ? Math.floor((Date.now() - this.startedAt) / 1000) : undefined,
    };
  }

  /** The ids of the agents that hold a stream to this server (each once). */
  agentIds(): string[] {
    return [...new Set([...this.broker.agents].map((a) => a.id))];
  }

  /** For `kctl status`: which agents this controller has, and what runs through them. */
  snapshot(): KonnectivityServerSnapshot {
    return {
      serverId: this.serverId,
      serverCount: this.serverCount(),
      agents: [...this.broker.agents].map((a) => ({
        id: a.id,
        agentIdClaimed: strayAgentId(a.identity, a.claimedId),
        node: a.identity.node,
        user: a.identity.user,
        auth: a.identity.method,
        ...this.agentListener?.arrival(a.peer),
        claimed: a.claimed,
        accepted: a.identifiers,
        dropped: a.dropped,
        draining: a.draining,
        extensions: [...a.extensions],
        connections: a.conns.size,
        pendingDials: a.pending.size,
        connectedAt: a.connectedAt.toISOString(),
      })),
      pendingDials: this.broker.pendingByRandom.size + this.broker.dials.size,
      establishedConnections: this.broker.establishedCount(),
      closingConnections: this.broker.closingCount(),
    };
  }

  /** Bytes of window growth the open tunnels hold (0 once they are all closed). */
  windowGrowthInUse(): number {
    return this.broker.windowBudget.used;
  }

  /** Flow-control numbers of every open tunnel. */
  tunnelStats(): TunnelStats[] {
    const out: TunnelStats[] = [];
    const all = [
      ...this.broker.pendingByRandom.values(),
      ...[...this.broker.agents].flatMap((a) => [...a.conns.values()]),
    ];
    for (const t of all) {
      out.push({
        trace: t.trace,
        agent: t.agent.id,
        random: t.random,
        connectID: t.connectID,
        address: t.address,
        state: t.state,
        unflushed: t.flow.unflushed,
        peakUnflushed: t.flow.peakUnflushed,
        held: t.flow.heldLength,
        peakHeld: t.flow.peakHeld,
      });
    }
    return out;
  }
}
