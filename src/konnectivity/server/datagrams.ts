// Datagrams between nodes, relayed by the server (spec.network.relay: controllers). Two workers
// that cannot reach each other (both behind NAT, no relay node) still both hold a stream to every
// controller, so a node's pod network hands the server a datagram for another node and the server
// passes it to that node's agent. What passes here is WireGuard's own packets, encrypted and
// authenticated end to end by the two nodes' keys: the server sees neither the pods' traffic nor
// anything it could forge. It only carries datagrams between agents that authenticated with a node
// certificate, stamps each with the sender's node as the certificate names it, and bounds what
// each node may send and be sent per second: one node cannot spend the controller's bandwidth, and
// many (names minted with a leaked token) cannot flood one node through it.
import type { Logger } from '../../base/log.ts';
import { packets, type KctlDatagram } from '../wire/protocol.ts';
import type { RelayOutcome } from './metrics.ts';
import type { AgentBackend } from './tunnel.ts';

/** What one node may send through the server, on average and at once. */
export const RELAY_RATE_BYTES_PER_S = 4 * 1024 * 1024;
export const RELAY_BURST_BYTES = 1024 * 1024;
/** Larger than any WireGuard packet a pod network with a 1500-byte path sends, far below a frame. */
export const MAX_DATAGRAM = 64 * 1024;
/** Nodes whose buckets are kept before the quiet ones are forgotten. */
const MAX_REMEMBERED_NODES = 1024;

export interface DatagramRelayOptions {
  /** The server's connected agents, now. */
  agents(): Iterable<AgentBackend>;
  log: Logger;
  /** Each datagram's fate and size (metrics). */
  counted?(outcome: RelayOutcome, bytes: number): void;
  rateBytesPerS?: number;
  burstBytes?: number;
}

interface Bucket {
  tokens: number;
  at: number;
}

/** A token bucket per node: `rate` bytes per second, at most `burst` at once. */
class Buckets {
  private readonly buckets = new Map<string, Bucket>();

  constructor(
    private readonly rate: number,
    private readonly burst: number,
  ) {}

  take(node: string, bytes: number): boolean {
    const now = Date.now();
    const b = this.buckets.get(node) ?? { tokens: this.burst, at: now };
    b.tokens = Math.min(this.burst, b.tokens + ((now - b.at) / 1000) * this.rate);
    b.at = now;
    this.buckets.set(node, b);
    // A full bucket is what a new one would be: forget nodes quiet long enough to have refilled.
    if (this.buckets.size > MAX_REMEMBERED_NODES)
      for (const [n, x] of this.buckets) if (now - x.at > (this.burst / this.rate) * 1000) this.buckets.delete(n);
    if (b.tokens < bytes) return false;
    b.tokens -= bytes;
    return true;
  }

  /** Gives back what `take` took for a datagram that was not sent after all. */
  refund(node: string, bytes: number): void {
    const b = this.buckets.get(node);
    if (b) b.tokens = Math.min(this.burst, b.tokens + bytes);
  }
}

export class DatagramRelay {
  /** Per node, not per stream: a node holding several streams to this server shares one bound. */
  private readonly sent: Buckets;
  /** Per destination node: what all senders together may hand it. */
  private readonly received: Buckets;
  private readonly rate: number;
  /** Outcomes not worth a line each, logged once a minute at most per kind. */
  private readonly warnedAt = new Map<string, number>();

  constructor(private readonly o: DatagramRelayOptions) {
    this.rate = o.rateBytesPerS ?? RELAY_RATE_BYTES_PER_S;
    const burst = o.burstBytes ?? RELAY_BURST_BYTES;
    this.sent = new Buckets(this.rate, burst);
    this.received = new Buckets(this.rate, burst);
  }

  /** One datagram from agent `from` for the node `d.node`: passed on, or dropped (datagrams may be lost). */
  forward(from: AgentBackend, d: KctlDatagram): RelayOutcome {
    const bytes = d.data.length;
    const outcome = this.route(from, d);
    this.o.counted?.(outcome, bytes);
    if (outcome !== 'forwarded') this.warn(outcome, from, d.node);
    return outcome;
  }

  private route(from: AgentBackend, d: KctlDatagram): RelayOutcome {
    const source = from.identity.node;
    // Only node agents of kctl workers (node certificate, kctl extensions) may use it.
    if (!source || !from.flowControl || !d.node || d.node === source) return 'not_allowed';
    if (d.data.length > MAX_DATAGRAM) return 'too_large';
    if (!this.sent.take(source, d.data.length)) return 'rate_limited';
    if (!this.received.take(d.node, d.data.length)) {
      this.sent.refund(source, d.data.length);
      return 'rate_limited';
    }
    const to = this.agentOf(d.node);
    if (!to) return 'no_route';
    to.send(packets.datagram(source, d.data));
    return 'forwarded';
  }

  /** The node's agent stream that can take a datagram now (a full stream drops it, like a full queue). */
  private agentOf(node: string): AgentBackend | undefined {
    for (const a of this.o.agents()) if (a.identity.node === node && a.flowControl && !a.gone && a.writable) return a;
    return undefined;
  }

  private warn(outcome: RelayOutcome, from: AgentBackend, to: string): void {
    const key = `${outcome}:${from.id}`;
    const now = Date.now();
    if (now - (this.warnedAt.get(key) ?? 0) < 60_000) return;
    this.warnedAt.set(key, now);
    const why: Record<Exclude<RelayOutcome, 'forwarded'>, string> = {
      not_allowed: 'only node agents of kctl workers may relay, to another node',
      too_large: `a datagram is at most ${MAX_DATAGRAM} bytes`,
      rate_limited: `a node may relay, and be relayed, ${(this.rate / 2 ** 20).toFixed(1)} MiB/s at most`,
      no_route: 'that node has no agent connected to this server',
    };
    this.o.log.warn(
      { agent: from.id, node: from.identity.node, to },
      `relayed datagrams dropped (${outcome}): ${why[outcome as Exclude<RelayOutcome, 'forwarded'>]}`,
    );
  }
}
