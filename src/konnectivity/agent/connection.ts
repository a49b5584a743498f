// One agent stream to one konnectivity server: opened by server-stream.ts (credentials,
// metadata, transport), then the server's serverid/servercount headers, keepalive (kctl
// servers), DRAIN, and the dispatch of the server's packets to dials and target connections
// (targets.ts). The agent (agent.ts) decides which servers to hold; this file knows one of them.
import type { Socket } from 'node:net';
import type * as grpc from '@grpc/grpc-js';
import { splitHostPort } from '../../base/addresses.ts';
import type { Logger } from '../../base/log.ts';
import type { ConnectionOptions } from './options.ts';
import {
  HEADER_TIMEOUT_MS,
  channelCredentials,
  connectMetadata,
  offeredExtensions,
  openServerStream,
  type ServerCall,
} from './server-stream.ts';
import { PendingDial, Target, type TargetOwner } from './targets.ts';
import type { WindowBudget } from '../wire/flow.ts';
import type { AgentDialFailure, AgentMetrics } from './metrics.ts';
import { StreamWriter } from '../wire/stream-writer.ts';
import type { LINK_ALPN } from '../wire/link.ts';
import type { CallError } from '../wire/link-calls.ts';
import {
  FLOW_CONTROL_EXTENSION,
  META,
  describePacket,
  isId,
  newRandom,
  newTraceId,
  offersExtension,
  packets,
  type Int64,
  type Packet,
} from '../wire/protocol.ts';

/** What every server connection of one agent shares. */
export interface ConnectionContext {
  readonly options: ConnectionOptions;
  readonly log: Logger;
  readonly metrics: AgentMetrics;
  /** Window growth for every target connection of the agent, whichever server it came from. */
  readonly windowBudget: WindowBudget;
  /** The agent is draining: new dials are refused so the server picks another agent. */
  draining(): boolean;
  /** A datagram from another node, relayed by a kctl server. */
  datagram(fromNode: string, data: Buffer): void;
}

/** One stream to one server: its dials and the target connections made for it. */
export class ServerConnection implements TargetOwner {
  serverId = '';
  serverCount = 1;
  /** The kctl extensions this stream agreed on: offered by this agent and answered by the server. */
  extensions: string[] = [];
  readonly targets = new Map<Int64, Target>();
  readonly dials = new Map<Int64, PendingDial>();
  private client: grpc.Client | undefined;
  private call: ServerCall | undefined;
  /** Per-connection credit (flow-control/1) with this server. */
  get flowControl(): boolean {
    return this.extensions.includes(FLOW_CONTROL_EXTENSION);
  }
  /** The agent stream's protocol: kctl-tunnel/1 with a kctl server that offers it, else gRPC. */
  transport: 'grpc' | typeof LINK_ALPN = 'grpc';
  private nextConnectID = 1n;
  private readonly writer = new StreamWriter<Packet>(() => {
    for (const t of this.targets.values()) t.maybeResume();
  });
  private closed = false;
  private held = false;
  private lastReceived = Date.now();
  private pingTimer: NodeJS.Timeout | undefined;
  readonly log: Logger;
  readonly windowBudget: WindowBudget;
  private readonly o: ConnectionOptions;
  private readonly metrics: AgentMetrics;
  private readonly draining: () => boolean;
  private readonly datagram: (fromNode: string, data: Buffer) => void;

  /** `onLost` runs once when a stream that was open (headers received) ends. */
  constructor(
    agent: ConnectionContext,
    readonly address: string,
    private readonly onLost: (why: string) => void,
    /** This server's own TLS name (ServerAddress.serverName). */
    private readonly serverName?: string,
  ) {
    this.o = agent.options;
    this.log = agent.log;
    this.metrics = agent.metrics;
    this.windowBudget = agent.windowBudget;
    this.draining = () => agent.draining();
    this.datagram = (fromNode, data) => agent.datagram(fromNode, data);
  }

  get dialTimeoutMs(): number {
    return this.o.dialTimeoutMs;
  }

  get upstreamBufferLimit(): number {
    return this.o.upstreamBufferLimit;
  }

  get holdMaxMs(): number {
    return this.o.holdMaxMs;
  }

  /** Connects and waits for the server's headers. */
  async open(): Promise<void> {
    // A copy only with a name of its own: renewed credentials land in the shared options.
    const o = this.serverName ? { ...this.o, serverName: this.serverName } : this.o;
    const creds = channelCredentials(o);
    const md = await connectMetadata(o);
    if (this.closed) throw new Error('agent stopping');

    const opened = await openServerStream(this.address, o, creds, md);
    this.call = opened.call;
    this.client = opened.client;
    this.transport = opened.transport;
    const call = opened.call;
    if (this.closed) {
      call.cancel();
      throw new Error('agent stopping');
    }
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => fail(new Error(`no serverid/servercount headers within ${HEADER_TIMEOUT_MS / 1000} s`)),
        HEADER_TIMEOUT_MS,
      );
      const fail = (err: Error): void => {
        clearTimeout(timer);
        call.off('metadata', onMetadata);
        this.close(err.message);
        reject(err);
      };
      const onError = (err: CallError): void => fail(new Error(err.details || err.message));
      const onEnd = (): void => fail(new Error('server closed the stream before sending its headers'));
      const onMetadata = (h: grpc.Metadata): void => {
        clearTimeout(timer);
        call.off('error', onError);
        call.off('end', onEnd);
        const ids = h.get(META.serverId).map(String);
        const counts = h.get(META.serverCount).map(String);
        if (ids.length !== 1 || !ids[0] || counts.length !== 1 || !/^[1-9][0-9]*$/.test(counts[0] ?? '')) {
          fail(
            new Error(
              `server must send exactly one ${META.serverId} and one ${META.serverCount} header (got ${ids.length} and ${counts.length})`,
            ),
          );
          return;
        }
        this.serverId = ids[0];
        this.serverCount = Number(counts[0]);
        // Silence counts from here: an open that took longer than the keepalive bound (SYN
        // retries into a partition that just healed) must not be dropped at its first check.
        this.lastReceived = Date.now();
        this.extensions = offeredExtensions(o).filter((e) => offersExtension(h.get(META.extensions), e));
        resolve();
      };
      call.once('metadata', onMetadata);
      call.once('error', onError);
      call.once('end', onEnd);
    });

    call.on('data', (p: Packet) => this.onPacket(p));
    call.on('error', (err: CallError) => {
      if (!this.closed) this.metrics.streamFailed(err.code);
      this.lost(err.details || err.message);
    });
    call.on('end', () => this.lost('server ended the stream'));
    if (this.flowControl) {
      // Checked every second (at most): a dead server is dropped at most 1 s after the bound.
      this.pingTimer = setInterval(
        () => this.keepalive(),
        Math.max(50, Math.min(1_000, Math.floor(o.keepaliveTimeMs / 2))),
      );
      this.pingTimer.unref();
    }
    this.held = true;
  }

  /** kctl servers only: ping when silent, give up when silent too long. */
  private keepalive(): void {
    const silent = Date.now() - this.lastReceived;
    const o = this.o;
    if (silent >= o.keepaliveTimeMs + o.keepaliveTimeoutMs) {
      this.lost(`no answer for ${(silent / 1000).toFixed(1)} s`);
    } else if (silent >= o.keepaliveTimeMs) {
      this.send(packets.ping(newRandom()));
    }
  }

  send(p: Packet): void {
    if (this.closed || !this.call) return;
    this.metrics.packet('from_agent', p.type);
    this.writer.write(this.call, p);
  }

  get writable(): boolean {
    return this.writer.ready && !this.closed;
  }

  private onPacket(p: Packet): void {
    this.lastReceived = Date.now();
    this.metrics.packet('to_agent', p.type);
    switch (p.type) {
      case 'DIAL_REQ':
        return this.onDial(p);
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
      case 'KCTL_DATAGRAM': {
        const d = p.kctlDatagram;
        if (d && this.flowControl && d.node) this.datagram(d.node, d.data);
        return;
      }
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
    if (this.draining()) {
      this.metrics.dialFailed('draining');
      this.log.debug(fields, 'refusing a dial: this agent is draining');
      this.send(packets.dialRsp(req.random, '0', 'agent is draining'));
      return;
    }
    const target = splitHostPort(req.address);
    if (req.protocol !== 'tcp' || !target) {
      this.send(packets.dialRsp(req.random, '0', `cannot dial ${req.protocol} ${req.address}: only tcp host:port`));
      return;
    }
    this.log.debug(fields, 'dialing target');
    // Own keys only: a dial to "constructor" must not find Object's.
    const names = this.o.localNames ?? {};
    const name = target.host.toLowerCase();
    const host = Object.hasOwn(names, name) ? names[name]! : target.host;
    const d = new PendingDial(this, req.random, req.address, host, target.port, trace);
    this.dials.set(req.random, d);
    d.start();
  }

  /** PendingDial callback: the target answered. */
  dialed(d: PendingDial, socket: Socket): void {
    this.dials.delete(d.random);
    const connectID = String(this.nextConnectID++);
    const t = new Target(this, socket, connectID, d.trace, d.address);
    this.targets.set(connectID, t);
    this.metrics.dialDuration.observe((Date.now() - d.startedAt) / 1000);
    this.send(packets.dialRsp(d.random, connectID));
    this.log.debug(
      { trace: d.trace, serverId: this.serverId, random: d.random, connectID, address: d.address },
      'target connected',
    );
    t.start();
  }

  dialFailed(d: PendingDial, error: string, reason: AgentDialFailure): void {
    this.dials.delete(d.random);
    this.metrics.dialFailed(reason);
    this.log.warn(
      { trace: d.trace, serverId: this.serverId, random: d.random, address: d.address },
      `target dial failed: ${error}`,
    );
    this.send(packets.dialRsp(d.random, '0', error));
  }

  dialCancelled(d: PendingDial): void {
    this.dials.delete(d.random);
    this.metrics.dialFailed('cancelled');
    this.log.debug({ trace: d.trace, serverId: this.serverId, random: d.random }, 'dial cancelled by server');
  }

  targetGone(t: Target): void {
    if (this.targets.get(t.connectID) === t) this.targets.delete(t.connectID);
  }

  private lost(why: string): void {
    if (this.closed) return;
    this.close(why);
    if (this.held) this.onLost(why);
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
    this.log.debug({ serverId: this.serverId || undefined, address: this.address, why }, 'server stream closed');
  }
}
