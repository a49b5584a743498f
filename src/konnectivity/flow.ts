// Per-connection flow control for one tunneled connection, on either end of an agent stream.
// Many connections share one gRPC stream between server and agent, so the stream itself must
// never stop being read (that is upstream's head-of-line blocking, ANP#180). Instead:
//
// - with a kctl peer (flow-control/1 negotiated), each direction of each connection has a
//   credit window: the sender sends at most `credit` bytes and then stops reading its source;
//   the receiver grants credit back as its local sink (socket, frontend stream) drains.
// - with an upstream peer, nothing can slow the sender down per connection, so the receiver
//   buffers up to `bufferLimit` bytes for a connection whose sink stalls and then closes that
//   one connection with an error, rather than stalling every other connection on the stream.
//
// Pure bookkeeping, no I/O: the server and the agent do the sending.

export interface FlowOptions {
  /** flow-control/1 negotiated with the peer. */
  negotiated: boolean;
  /** Initial credit in each direction (both ends use the same constant). */
  window: number;
  /** Unflushed bytes allowed towards a stalled sink when the peer sends without credit. */
  bufferLimit: number;
}

export class ConnectionFlow {
  private credit: number;
  private held: Buffer[] = [];
  private heldBytes = 0;
  private grantable = 0;
  private readonly grantBatch: number;
  /** Bytes handed to the local sink that it has not flushed yet. */
  unflushed = 0;
  /** Highest `unflushed` seen: what this connection cost in memory at worst. */
  peakUnflushed = 0;
  /** Highest number of bytes held back for lack of credit. */
  peakHeld = 0;

  constructor(readonly opts: FlowOptions) {
    this.credit = opts.negotiated ? opts.window : Number.POSITIVE_INFINITY;
    // Grant in quarters of the window: few KCTL_CREDIT packets, and the sender never runs dry
    // while the receiver keeps up.
    this.grantBatch = Math.max(1, Math.floor(opts.window / 4));
  }

  // ---- outbound: local source -> peer ----

  /** True while the local source may be read: credit left and nothing held back. */
  get open(): boolean {
    return this.credit > 0 && this.heldBytes === 0;
  }

  /** Bytes currently held back for lack of credit. */
  get heldLength(): number {
    return this.heldBytes;
  }

  /** The part of `buf` that may be sent now; the rest is held until the peer grants credit. */
  take(buf: Buffer): Buffer | null {
    if (this.heldBytes > 0) {
      this.hold(buf);
      return null;
    }
    if (buf.length <= this.credit) {
      this.credit -= buf.length;
      return buf;
    }
    if (this.credit <= 0) {
      this.hold(buf);
      return null;
    }
    const now = buf.subarray(0, this.credit);
    this.hold(buf.subarray(this.credit));
    this.credit = 0;
    return now;
  }

  /** The peer granted `bytes` more; returns held bytes that may now be sent, in order. */
  grant(bytes: number): Buffer[] {
    if (!(bytes > 0)) return [];
    this.credit += bytes;
    const out: Buffer[] = [];
    while (this.held.length > 0 && this.credit > 0) {
      const head = this.held[0] as Buffer;
      if (head.length <= this.credit) {
        this.held.shift();
        this.credit -= head.length;
        this.heldBytes -= head.length;
        out.push(head);
      } else {
        out.push(head.subarray(0, this.credit));
        this.held[0] = head.subarray(this.credit);
        this.heldBytes -= this.credit;
        this.credit = 0;
      }
    }
    return out;
  }

  /** Drops held bytes (the connection is closing). */
  discardHeld(): void {
    this.held = [];
    this.heldBytes = 0;
  }

  private hold(buf: Buffer): void {
    this.held.push(buf);
    this.heldBytes += buf.length;
    if (this.heldBytes > this.peakHeld) this.peakHeld = this.heldBytes;
  }

  // ---- inbound: peer -> local sink ----

  /** `bytes` arrived from the peer and go to the sink. False when over the buffer limit. */
  received(bytes: number): boolean {
    this.unflushed += bytes;
    if (this.unflushed > this.peakUnflushed) this.peakUnflushed = this.unflushed;
    // A kctl peer never exceeds the window; one that does is broken and gets the same treatment.
    return this.unflushed <= (this.opts.negotiated ? 2 * this.opts.window : this.opts.bufferLimit);
  }

  /** The sink flushed `bytes`; returns the credit to grant the peer now (0: not yet). */
  flushed(bytes: number): number {
    this.unflushed -= bytes;
    if (!this.opts.negotiated) return 0;
    this.grantable += bytes;
    if (this.grantable < this.grantBatch) return 0;
    const g = this.grantable;
    this.grantable = 0;
    return g;
  }
}
