// Per-connection flow control for one tunneled connection, on either end of an agent stream.
// Many connections share one gRPC stream between server and agent, so the stream itself must
// never stop being read (that is upstream's head-of-line blocking, ANP#180). Instead:
//
// - with a kctl peer (flow-control/1 negotiated), each direction of each connection has a
//   credit window: the sender sends at most `credit` bytes and then stops reading its source;
//   the receiver grants credit back as its local sink (socket, frontend stream) drains.
//   The receiver also grows the window (doubling, up to `maxWindow`) while its sink keeps up,
//   so one fast connection can fill a long path; a stalled or slow sink never grows it. The
//   growth comes out of one budget per process (WindowBudget), so a sink that kept up and
//   then stalled can hold at most `maxWindow`, and all of them together at most the budget.
// - with an upstream peer, nothing can slow the sender down per connection, so the receiver
//   buffers up to `bufferLimit` bytes for a connection whose sink stalls and then closes that
//   one connection with an error, rather than stalling every other connection on the stream.
//
// Pure bookkeeping, no I/O: the server and the agent do the sending.

/** Window growth (beyond each connection's initial window) that one process may grant in all. */
export class WindowBudget {
  private inUse = 0;
  constructor(readonly total: number) {}

  get used(): number {
    return this.inUse;
  }

  take(bytes: number): boolean {
    if (this.inUse + bytes > this.total) return false;
    this.inUse += bytes;
    return true;
  }

  give(bytes: number): void {
    this.inUse -= bytes;
  }
}

export interface FlowOptions {
  /** flow-control/1 negotiated with the peer. */
  negotiated: boolean;
  /** Initial credit in each direction (both ends use the same constant). */
  window: number;
  /** Largest receive window this end grows to; growth needs `budget` too. */
  maxWindow?: number;
  budget?: WindowBudget;
  /** Unflushed bytes allowed towards a stalled sink when the peer sends without credit. */
  bufferLimit: number;
}

export class ConnectionFlow {
  private credit: number;
  private held: Buffer[] = [];
  private heldBytes = 0;
  private grantable = 0;
  /** Credit this end lets the peer have outstanding; grows while the sink keeps up. */
  private recvWindow: number;
  private released = false;
  /** Bytes handed to the local sink that it has not flushed yet. */
  unflushed = 0;
  /** Highest `unflushed` seen: what this connection cost in memory at worst. */
  peakUnflushed = 0;
  /** Highest number of bytes held back for lack of credit. */
  peakHeld = 0;

  constructor(readonly opts: FlowOptions) {
    this.credit = opts.negotiated ? opts.window : Number.POSITIVE_INFINITY;
    this.recvWindow = opts.window;
  }

  /** The receive window now (what a stalled sink may have to buffer at most). */
  get receiveWindow(): number {
    return this.recvWindow;
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

  /** The connection is gone: its window growth goes back to the budget. Idempotent. */
  release(): void {
    this.discardHeld();
    if (this.released) return;
    this.released = true;
    this.opts.budget?.give(this.recvWindow - this.opts.window);
    this.recvWindow = this.opts.window;
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
    return this.unflushed <= (this.opts.negotiated ? 2 * this.recvWindow : this.opts.bufferLimit);
  }

  /** The sink flushed `bytes`; returns the credit to grant the peer now (0: not yet). */
  flushed(bytes: number): number {
    this.unflushed -= bytes;
    if (!this.opts.negotiated) return 0;
    this.grantable += bytes;
    // Grant in quarters of the window: few KCTL_CREDIT packets, and the sender never runs dry
    // while the receiver keeps up.
    const batch = Math.max(1, Math.floor(this.recvWindow / 4));
    if (this.grantable < batch) return 0;
    let g = this.grantable;
    this.grantable = 0;
    // Less than a batch still waits in the sink: the sink keeps up and the sender waits for
    // credit, so the round trip, not the sink, limits this connection. Double the window.
    if (
      this.unflushed < batch &&
      !this.released &&
      this.recvWindow < (this.opts.maxWindow ?? this.opts.window) &&
      this.opts.budget?.take(this.recvWindow)
    ) {
      g += this.recvWindow;
      this.recvWindow *= 2;
    }
    return g;
  }
}
