// Bounds on the agent port's connections until they authenticate. Anyone who reaches the port can
// open a connection, and until authentication accepts a Connect on it a connection is nobody's:
// so at most `maxConnections` of them wait at once, each has `timeoutMs` from accept (the TLS
// handshake included) to authenticate, and it may send at most `maxBytes`, TLS records included,
// before it does. Drops are logged one line per burst, so a flood of connections does not become a
// flood of log lines.
//
// At the cap, a waiting connection is closed to make room for the new one, rather than the new
// one being turned away: whoever keeps the cap's worth of connections open would otherwise keep
// every new agent out with a few dozen connections a second. The one closed is the oldest of the
// source address that holds the most waiting connections: a flood from one address (or a few)
// pushes out its own connections first, so an agent across a slow link, which needs several round
// trips to authenticate (a second and more), is not pushed out by a flood that reconnects at once.
// A flood from as many addresses as the cap still can; the deadline then bounds what it holds.
import type { Socket } from 'node:net';
import type { Logger } from '../../base/log.ts';

export interface PreAuthLimits {
  /** Connections not authenticated yet, at most; at the cap a new one closes the oldest. */
  maxConnections: number;
  /** From accept to authentication, the TLS handshake included. */
  timeoutMs: number;
  /** Bytes read from the connection (TLS records included) before authentication. */
  maxBytes: number;
}

export const DEFAULT_PRE_AUTH_LIMITS: PreAuthLimits = { maxConnections: 256, timeoutMs: 10_000, maxBytes: 64 * 1024 };

/**
 * How often the waiting connections' byte counts are read. Bytes the TLS and HTTP/2 layers read
 * without telling JavaScript are only seen here; the HTTP/2 receive windows stay at their 64 KiB
 * default until authentication, so what arrives in between is not held.
 */
const SWEEP_MS = 50;
/** After a warn line, further drops are counted and summed up in one line at most this often. */
const WARN_INTERVAL_MS = 10_000;

type DropReason = 'cap' | 'timeout' | 'size';

/** The remote end as grpc-js's getPeer() spells it ("host:port", IPv6 without brackets). */
export function peerKey(peer: string): string {
  return peer.replace(/^\[(.*)\]:(\d+)$/, '$1:$2');
}

/** One connection waiting to authenticate. */
export class Waiting {
  /** The TLS socket over `socket`, once the listener has it. */
  tls: Socket | undefined;
  /** Closes the connection at its deadline; cleared when it passes or closes. */
  timer: NodeJS.Timeout | undefined;
  private readonly passHooks: (() => void)[] = [];

  constructor(
    readonly socket: Socket,
    readonly peer: string,
    /** The remote address alone: what the cap counts connections by. */
    readonly address: string,
  ) {}

  /** Runs `hook` when the connection authenticates (e.g. to stop watching it, or to widen its windows). */
  onPass(hook: () => void): void {
    this.passHooks.push(hook);
  }

  passed(): void {
    clearTimeout(this.timer);
    for (const hook of this.passHooks.splice(0)) hook();
  }
}

export class PreAuthBounds {
  private readonly waiting = new Set<Waiting>();
  /** Sockets closed here (raw and TLS): their own "dropped" lines would repeat ours. */
  private readonly dropped = new WeakSet<Socket>();
  private sweeper: NodeJS.Timeout | undefined;
  private summary: NodeJS.Timeout | undefined;
  private counts: Record<DropReason, number> = { cap: 0, timeout: 0, size: 0 };

  readonly limits: PreAuthLimits;

  /** Limits left undefined take DEFAULT_PRE_AUTH_LIMITS's. */
  constructor(
    limits: Partial<PreAuthLimits>,
    private readonly log: Logger,
  ) {
    const d = DEFAULT_PRE_AUTH_LIMITS;
    this.limits = {
      maxConnections: limits.maxConnections ?? d.maxConnections,
      timeoutMs: limits.timeoutMs ?? d.timeoutMs,
      maxBytes: limits.maxBytes ?? d.maxBytes,
    };
  }

  /**
   * A connection just accepted: it waits to authenticate, and at the cap one waiting connection is
   * closed (evictee). `client` is who it comes from when that is not the socket's remote address
   * (a connection the front door handed on): the cap counts by it.
   */
  admit(socket: Socket, client = socket.remoteAddress ?? ''): Waiting {
    const peer = peerKey(`${socket.remoteAddress ?? ''}:${socket.remotePort ?? 0}`);
    if (this.waiting.size >= this.limits.maxConnections) {
      const victim = this.evictee();
      if (victim) this.drop(victim, 'cap');
    }
    const w = new Waiting(socket, peer, client);
    this.waiting.add(w);
    // From accept, so the TLS handshake counts; the TLS server's own handshake timeout is set later than this.
    w.timer = setTimeout(() => this.drop(w, 'timeout'), this.limits.timeoutMs);
    socket.once('close', () => {
      clearTimeout(w.timer);
      this.waiting.delete(w);
    });
    this.sweeper ??= setInterval(() => this.sweep(), SWEEP_MS).unref();
    return w;
  }

  /** The oldest waiting connection of the address that has the most waiting (a Set iterates in insertion order). */
  private evictee(): Waiting | undefined {
    const count = new Map<string, number>();
    for (const w of this.waiting) count.set(w.address, (count.get(w.address) ?? 0) + 1);
    let top = '';
    let most = 0;
    for (const [address, n] of count) if (n > most) [top, most] = [address, n];
    for (const w of this.waiting) if (w.address === top) return w;
    return undefined;
  }

  /** The waiting connection with this remote end (remoteAddress, remotePort), if any. */
  find(remoteAddress: string | undefined, remotePort: number | undefined): Waiting | undefined {
    const peer = `${remoteAddress ?? ''}:${remotePort ?? 0}`;
    for (const w of this.waiting) if (w.peer === peer) return w;
    return undefined;
  }

  /**
   * A Connect on the connection from `peer` (as the call's getPeer() gives it) authenticated: it is
   * bounded no more. Two connections from the same address and port (to two local addresses) both pass.
   */
  pass(peer: string): void {
    const key = peerKey(peer);
    for (const w of this.waiting) {
      if (w.peer !== key) continue;
      this.waiting.delete(w);
      w.passed();
    }
  }

  /** Reads the connection's byte count now (called where a layer above shows that bytes arrived). */
  check(w: Waiting): void {
    if (this.waiting.has(w) && w.socket.bytesRead > this.limits.maxBytes) this.drop(w, 'size');
  }

  /** Whether these bounds closed `socket` (its raw or its TLS socket). */
  wasDropped(socket: Socket): boolean {
    return this.dropped.has(socket);
  }

  /** Stops the sweep and says what the current burst dropped so far. */
  close(): void {
    clearInterval(this.sweeper);
    this.sweeper = undefined;
    clearTimeout(this.summary);
    this.summarise(false);
    for (const w of this.waiting) clearTimeout(w.timer);
    this.waiting.clear();
  }

  private sweep(): void {
    for (const w of this.waiting) if (w.socket.bytesRead > this.limits.maxBytes) this.drop(w, 'size');
    if (this.waiting.size === 0) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
    }
  }

  private drop(w: Waiting, reason: DropReason): void {
    clearTimeout(w.timer);
    this.waiting.delete(w);
    this.dropped.add(w.socket);
    if (w.tls) this.dropped.add(w.tls);
    w.socket.destroy();
    this.report(reason, w.peer, w.socket.bytesRead);
  }

  /** The first drop of a burst is logged at once; the rest are counted and summed up every WARN_INTERVAL_MS. */
  private report(reason: DropReason, peer: string, bytesRead: number): void {
    if (this.summary) {
      this.counts[reason]++;
      return;
    }
    this.log.warn(
      { peer, bytesRead, waiting: this.waiting.size },
      `agent port: ${this.why(reason)}; closed a connection from ${peer}`,
    );
    this.summary = setTimeout(() => this.summarise(true), WARN_INTERVAL_MS).unref();
  }

  private summarise(again: boolean): void {
    const { cap, timeout, size } = this.counts;
    const total = cap + timeout + size;
    this.summary = undefined;
    if (total === 0) return;
    this.counts = { cap: 0, timeout: 0, size: 0 };
    const parts = [
      cap ? `${cap} to make room at the cap of ${this.limits.maxConnections} waiting` : '',
      timeout ? `${timeout} not authenticated within ${this.limits.timeoutMs / 1000} s` : '',
      size ? `${size} sent more than ${this.limits.maxBytes / 1024} KiB first` : '',
    ].filter(Boolean);
    this.log.warn(
      { dropped: { atCap: cap, timedOut: timeout, tooLarge: size }, waiting: this.waiting.size },
      `agent port: closed ${total} more connections before they authenticated (${parts.join(', ')})`,
    );
    if (again) this.summary = setTimeout(() => this.summarise(true), WARN_INTERVAL_MS).unref();
  }

  private why(reason: DropReason): string {
    switch (reason) {
      case 'cap':
        return `${this.limits.maxConnections} connections were waiting to authenticate (the cap), so the one waiting longest made room for a new one (of the address with the most waiting)`;
      case 'timeout':
        return `not authenticated within ${this.limits.timeoutMs / 1000} s`;
      case 'size':
        return `more than ${this.limits.maxBytes / 1024} KiB before authenticating`;
    }
  }
}
