// The server's switchboard: connected agents, pending dials and established tunnels, and the
// rules that move a tunnel between them. Frontends (GRPC, HTTP-CONNECT) and the agent stream
// handler call in; nothing here listens on a socket.
//
// Invariants the leak test checks: every tunnel is in exactly one table (pending by random,
// or its agent's conns by connectID) until `finish`, and every path out of a state ends in
// `finish`: answered, failed, timed out, cancelled by either side, or its agent gone.
import { splitHostPort } from '../../base/addresses.ts';
import type { Logger } from '../../base/log.ts';
import { WindowBudget } from '../wire/flow.ts';
import type { DialFailureReason, ServerMetrics } from './metrics.ts';
import {
  MAX_DATA_CHUNK,
  WINDOW_GROWTH_BUDGET,
  describePacket,
  isId,
  newTraceId,
  packets,
  type DialRequest,
  type Int64,
  type Packet,
} from '../wire/protocol.ts';
import type { DatagramRelay } from './datagrams.ts';
import { agentsByStrategy, dialAddress, noAgentMessage, pickAgent, type ProxyStrategy } from './routing.ts';
import { Tunnel, type AgentBackend, type Frontend } from './tunnel.ts';
import { WaitingDials, type DialWait } from './waiting-dials.ts';

export interface BrokerOptions {
  serverId: string;
  strategies: ProxyStrategy[];
  dialTimeoutMs: number;
  closeTimeoutMs: number;
  /** Per-connection buffer towards a stalled frontend when the agent cannot be flow-controlled. */
  upstreamBufferLimit: number;
  metrics: ServerMetrics;
  log: Logger;
  /** Relays datagrams between node agents; without it they are dropped. */
  datagrams?: DatagramRelay;
  /** Dials whose agent is expected soon wait for it; without it they fail at once. */
  dialWait?: DialWait;
}

/** How every message about a dial no agent can take begins (both frontends report it; clients match on it). */
export const NO_AGENT = 'No agent available';

export class Broker {
  readonly agents = new Set<AgentBackend>();
  readonly pendingByRandom = new Map<Int64, Tunnel>();
  /** Window growth for every tunnel of this server. */
  readonly windowBudget = new WindowBudget(WINDOW_GROWTH_BUDGET);
  /** Frontends dial through it: a dial may wait for its agent (waiting-dials.ts). */
  readonly dials: WaitingDials;
  private readonly log: Logger;

  constructor(private readonly o: BrokerOptions) {
    this.log = o.log;
    this.dials = new WaitingDials(this, o.dialWait);
  }

  // ---- counts (metrics, snapshot, tests) ----

  establishedCount(): number {
    let n = 0;
    for (const a of this.agents) for (const t of a.conns.values()) if (t.state === 'established') n++;
    return n;
  }

  closingCount(): number {
    let n = 0;
    for (const a of this.agents) for (const t of a.conns.values()) if (t.state === 'closing') n++;
    return n;
  }

  // ---- agents ----

  addAgent(a: AgentBackend): void {
    this.agents.add(a);
  }

  /** The agent's stream ended: every dial and tunnel on it ends now (ANP#126). */
  removeAgent(a: AgentBackend, why: string): void {
    if (a.gone) return;
    a.gone = true;
    this.agents.delete(a);
    const pending = [...a.pending];
    const conns = [...a.conns.values()];
    for (const t of pending) {
      this.fail(t, `agent ${a.id} disconnected before answering the dial to ${t.address} (${why})`, 'backend_close');
    }
    for (const t of conns) {
      this.log.debug({ ...t.logFields(), why }, 'tunnel closed: agent disconnected');
      this.finish(t);
      this.closeFrontend(t, `agent ${a.id} disconnected`);
    }
  }

  agentDrained(a: AgentBackend): void {
    for (const t of a.conns.values()) this.maybeResumeFrontend(t);
  }

  /** The ready_backends gauge: how many agents (destHost: names and addresses) each strategy can pick from. */
  agentsByStrategy(): Map<ProxyStrategy, number> {
    return agentsByStrategy(this.agents, this.o.strategies);
  }

  // ---- frontend -> broker ----

  /** True when a connected agent may serve `host` now. */
  servable(host: string): boolean {
    return pickAgent(this.agents, this.o.strategies, host) !== null;
  }

  /** A dial (through `dials`). Returns the tunnel, or null after telling the frontend why not (and how long it waited). */
  dial(frontend: Frontend, req: DialRequest, waitedMs?: number): Tunnel | null {
    const fail = (message: string, reason: DialFailureReason): null => {
      this.o.metrics.dialFailed(reason);
      this.log.warn(
        { address: req.address, random: req.random, frontend: frontend.kind, reason },
        `dial failed: ${message}`,
      );
      frontend.dialFailed(message, reason);
      return null;
    };
    if (req.protocol !== 'tcp')
      return fail(`unsupported protocol ${JSON.stringify(req.protocol)}; only tcp`, 'bad_request');
    const target = splitHostPort(req.address);
    if (!target) return fail(`dial address ${JSON.stringify(req.address)} is not host:port`, 'bad_request');
    if (!isId(req.random)) return fail('dial id (random) must be a positive int64', 'bad_request');
    if (this.pendingByRandom.has(req.random)) return fail(`dial id ${req.random} is already pending`, 'bad_request');
    const agent = pickAgent(this.agents, this.o.strategies, target.host);
    if (!agent) {
      const waited = waitedMs === undefined ? '' : ` (waited ${(waitedMs / 1000).toFixed(1)} s for its agent)`;
      const why = noAgentMessage(target.host, this.agents.size, this.o.serverId, this.o.strategies);
      return fail(`${NO_AGENT}: ${why}${waited}`, 'no_agent');
    }
    const address = dialAddress(agent, target.host, target.port, req.address);
    if (address === undefined)
      return fail(
        `the agent of node ${target.host} cannot dial its node's name (an older kctl worker or an upstream agent) and holds no address of it`,
        'no_agent',
      );

    const t = new Tunnel(
      newTraceId(),
      req.random,
      req.address,
      agent,
      frontend,
      this.o.upstreamBufferLimit,
      this.windowBudget,
    );
    this.pendingByRandom.set(t.random, t);
    agent.pending.add(t);
    if (this.o.dialTimeoutMs > 0) t.timer = setTimeout(() => this.dialTimedOut(t), this.o.dialTimeoutMs);
    // The trace id travels only to kctl agents; upstream agents are matched by (agent, random).
    agent.send(packets.dialReq(address, req.random, agent.flowControl ? t.trace : undefined));
    this.log.debug(t.logFields(), 'dial sent to agent');
    return t;
  }

  private dialTimedOut(t: Tunnel): void {
    if (t.state !== 'pending') return;
    t.agent.send(packets.dialCls(t.random));
    // Say when the agent has gone quiet: over a bad link that is the likely reason, not the target.
    const silent =
      t.agent.silentMs >= 2_000 ? ` (nothing heard from it for ${Math.round(t.agent.silentMs / 1000)} s)` : '';
    this.fail(
      t,
      `dial to ${t.address} timed out after ${this.o.dialTimeoutMs} ms waiting for agent ${t.agent.id}${silent}`,
      'timeout',
    );
  }

  /** Bytes from the client for the target. */
  fromFrontend(t: Tunnel, buf: Buffer): void {
    if (t.state !== 'established' || t.connectID === undefined) return;
    for (let off = 0; off < buf.length; off += MAX_DATA_CHUNK) {
      const part = t.flow.take(
        off === 0 && buf.length <= MAX_DATA_CHUNK ? buf : buf.subarray(off, off + MAX_DATA_CHUNK),
      );
      if (part) t.agent.send(packets.data(t.connectID, part));
    }
    if (!t.flow.open || !t.agent.writable) {
      t.readingPaused = true;
      t.frontend.pauseReading();
    }
  }

  private maybeResumeFrontend(t: Tunnel): void {
    if (t.readingPaused && t.state === 'established' && t.flow.open && t.agent.writable) {
      t.readingPaused = false;
      t.frontend.resumeReading();
    }
  }

  /** The client closes an established tunnel (CLOSE_REQ, or the socket ended). */
  frontendClose(t: Tunnel): void {
    if (t.state === 'pending') return this.frontendCancel(t);
    if (t.state !== 'established' || t.connectID === undefined) return;
    if (t.flow.heldLength > 0 && !t.frontendDone) {
      t.closeAfterFlush = true;
      return;
    }
    t.state = 'closing';
    t.flow.discardHeld();
    t.agent.send(packets.closeReq(t.connectID));
    // Wait for the agent's CLOSE_RSP, but not forever.
    t.timer = setTimeout(() => {
      this.log.debug(t.logFields(), 'agent did not confirm close in time');
      this.finish(t);
      this.closeFrontend(t, 'agent did not confirm the close');
    }, this.o.closeTimeoutMs);
    this.log.debug(t.logFields(), 'tunnel closing');
  }

  /** The client gives up a pending dial (DIAL_CLS). */
  frontendCancel(t: Tunnel): void {
    if (t.state !== 'pending') return;
    t.agent.send(packets.dialCls(t.random));
    this.o.metrics.dialFailed('frontend_close');
    this.log.debug(t.logFields(), 'client cancelled dial');
    t.frontendDone = true;
    this.finish(t);
  }

  /** The client went away without a word: tell the agent. */
  frontendGone(t: Tunnel): void {
    t.frontendDone = true;
    if (t.state === 'pending') this.frontendCancel(t);
    else if (t.state === 'established') this.frontendClose(t);
  }

  // ---- agent -> broker ----

  fromAgent(a: AgentBackend, p: Packet): void {
    switch (p.type) {
      case 'DIAL_RSP':
        return this.dialResponse(a, p);
      case 'DATA':
        return this.agentData(a, p);
      case 'CLOSE_RSP':
        return this.agentClose(a, p);
      case 'KCTL_CREDIT':
        return this.agentCredit(a, p);
      case 'KCTL_PING':
        if (a.flowControl) a.send(packets.pong(p.kctlPing?.nonce ?? '0'));
        return;
      case 'KCTL_DATAGRAM':
        if (p.kctlDatagram && this.o.datagrams) this.o.datagrams.forward(a, p.kctlDatagram);
        else
          this.log.debug(
            { agent: a.id, ...describePacket(p) },
            'dropping a datagram: this server does not relay (spec.network.relay)',
          );
        return;
      case 'DRAIN':
        if (!a.draining) this.log.info({ agent: a.id }, 'agent is draining; new dials go to other agents');
        a.draining = true;
        return;
      default:
        this.log.debug({ agent: a.id, ...describePacket(p) }, 'ignoring unexpected packet from agent');
    }
  }

  private dialResponse(a: AgentBackend, p: Packet): void {
    const rsp = p.dialResponse;
    if (!rsp) return;
    const t = this.pendingByRandom.get(rsp.random);
    if (!t || t.agent !== a) {
      // Late (timed out, cancelled) or unknown: the agent may hold a connection nobody wants.
      if (!rsp.error && isId(rsp.connectID)) a.send(packets.closeReq(rsp.connectID));
      this.log.debug(
        { agent: a.id, random: rsp.random, connectID: rsp.connectID },
        'DIAL_RSP for no pending dial; closing it on the agent',
      );
      return;
    }
    if (rsp.error) {
      this.fail(t, rsp.error, 'error_response');
      return;
    }
    if (!isId(rsp.connectID) || a.conns.has(rsp.connectID)) {
      // Never CLOSE_REQ a duplicate id: that would close the tunnel that already holds it.
      this.fail(t, `agent ${a.id} answered with an invalid or duplicate connectID ${rsp.connectID}`, 'error_response');
      return;
    }
    clearTimeout(t.timer);
    t.timer = undefined;
    this.pendingByRandom.delete(t.random);
    a.pending.delete(t);
    t.state = 'established';
    t.connectID = rsp.connectID;
    a.conns.set(rsp.connectID, t);
    this.o.metrics.dialDuration.observe(Number(process.hrtime.bigint() - t.startedAt) / 1e9);
    this.log.debug(t.logFields(), 'tunnel established');
    t.frontend.established(rsp.connectID);
  }

  private agentData(a: AgentBackend, p: Packet): void {
    const d = p.data;
    if (!d) return;
    const t = a.conns.get(d.connectID);
    if (!t) {
      // Stray DATA: tell the agent to close whatever it has under that id.
      if (isId(d.connectID)) a.send(packets.closeReq(d.connectID));
      return;
    }
    if (t.state !== 'established') return; // closing: the client is gone or going
    const len = d.data.length;
    if (len === 0) return;
    if (!t.flow.received(len)) {
      this.log.warn(
        { ...t.logFields(), buffered: t.flow.unflushed },
        'client is not reading; closing this tunnel to protect the others',
      );
      this.closeBoth(
        t,
        `client is not reading: more than ${t.flow.opts.bufferLimit} bytes buffered for this connection`,
      );
      return;
    }
    const id = d.connectID;
    t.frontend.write(d.data, () => {
      const grant = t.flow.flushed(len);
      if (grant > 0 && t.state === 'established') a.send(packets.credit(id, grant));
    });
  }

  private agentCredit(a: AgentBackend, p: Packet): void {
    const c = p.kctlCredit;
    if (!c || !a.flowControl) return;
    const t = a.conns.get(c.connectID);
    if (!t || t.state !== 'established' || t.connectID === undefined) return;
    for (const part of t.flow.grant(Number(c.bytes))) a.send(packets.data(t.connectID, part));
    if (t.closeAfterFlush && t.flow.heldLength === 0) this.frontendClose(t);
    else this.maybeResumeFrontend(t);
  }

  private agentClose(a: AgentBackend, p: Packet): void {
    const c = p.closeResponse;
    if (!c) return;
    const t = a.conns.get(c.connectID);
    if (!t) return; // already gone on our side
    this.log.debug({ ...t.logFields(), error: c.error || undefined }, 'tunnel closed by agent');
    this.finish(t);
    this.closeFrontend(t, c.error || undefined);
  }

  // ---- endings ----

  private fail(t: Tunnel, message: string, reason: DialFailureReason): void {
    if (t.state !== 'pending') return;
    this.o.metrics.dialFailed(reason);
    this.log.warn({ ...t.logFields(), reason }, `dial failed: ${message}`);
    this.finish(t);
    if (t.frontendDone) return;
    t.frontendDone = true;
    t.frontend.dialFailed(message, reason);
  }

  /** Close from our side: the client gets the error now, the agent a CLOSE_REQ. */
  private closeBoth(t: Tunnel, error: string): void {
    this.closeFrontend(t, error);
    this.frontendClose(t);
  }

  private closeFrontend(t: Tunnel, error?: string): void {
    if (t.frontendDone) return;
    t.frontendDone = true;
    t.frontend.close(error);
  }

  /** Takes the tunnel out of every table. */
  private finish(t: Tunnel): void {
    if (t.state === 'done') return;
    clearTimeout(t.timer);
    t.timer = undefined;
    if (this.pendingByRandom.get(t.random) === t) this.pendingByRandom.delete(t.random);
    t.agent.pending.delete(t);
    if (t.connectID !== undefined && t.agent.conns.get(t.connectID) === t) t.agent.conns.delete(t.connectID);
    t.flow.release();
    t.state = 'done';
  }

  /** Stops everything (server shutdown). */
  shutdown(): void {
    this.dials.flush();
    for (const a of [...this.agents]) {
      this.removeAgent(a, 'server stopping');
      a.end();
    }
  }
}
