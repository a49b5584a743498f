// The agent's target side: dialing a target for a DIAL_REQ (PendingDial) and one established
// target connection tunneled under its connectID (Target), with its flow control. Both belong
// to one server connection (connection.ts), reached through the TargetOwner interface.
import { connect as netConnect, type Socket } from 'node:net';
import type { Logger } from '../../base/log.ts';
import { nativeAddon, tcpQuiet, tcpUnread } from '../../base/native.ts';
import { peerClosedByProgram } from '../../base/tcp-table.ts';
import { ConnectionFlow, type WindowBudget } from '../wire/flow.ts';
import { INITIAL_WINDOW, MAX_DATA_CHUNK, MAX_WINDOW, packets, type Int64, type Packet } from '../wire/protocol.ts';

/** The server connection a dial or a target belongs to: what the target side needs from it. */
export interface TargetOwner {
  readonly serverId: string;
  /** flow-control/1 negotiated with this server. */
  readonly flowControl: boolean;
  /** False while the stream's send buffer is full; targets pause until maybeResume. */
  readonly writable: boolean;
  readonly log: Logger;
  readonly windowBudget: WindowBudget;
  readonly dialTimeoutMs: number;
  readonly upstreamBufferLimit: number;
  /** The longest the client's bytes are held back from a target that is still open (see Target.fromServer). */
  readonly holdMaxMs: number;
  send(p: Packet): void;
  /** The dial reached its target: the socket is now the owner's to tunnel. */
  dialed(d: PendingDial, socket: Socket): void;
  dialFailed(d: PendingDial, error: string, reason: 'timeout' | 'error' | 'fd_exhausted'): void;
  dialCancelled(d: PendingDial): void;
  targetGone(t: Target): void;
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

export class PendingDial {
  readonly startedAt = Date.now();
  private socket: Socket | undefined;
  private timer: NodeJS.Timeout | undefined;
  private settled = false;

  constructor(
    private readonly conn: TargetOwner,
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
    }, this.conn.dialTimeoutMs);
    socket.once('connect', () => {
      if (!this.settle(false)) return;
      this.conn.dialed(this, socket);
    });
    socket.once('error', (err: NodeJS.ErrnoException) => {
      if (this.settle())
        this.conn.dialFailed(
          this,
          dialErrorText(this.address, this.host, err),
          err.code === 'EMFILE' ? 'fd_exhausted' : 'error',
        );
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

/**
 * How long a target must stay quiet (nothing unread, not closed) after paused reading before
 * held bytes are written to it: the time its kernel takes to send what our closed window held
 * back, on the same host or its network.
 */
const QUIET_MS = 2;

/**
 * Once the hold's bound has passed, how often the agent looks again at a target whose program has
 * closed while its last bytes are still on their way to us (until they have all come, or it ends).
 */
const CLOSED_RECHECK_MS = 1_000;

/** One connection to a target, tunneled to the server under `connectID`. */
export class Target {
  readonly flow: ConnectionFlow;
  private paused = false;
  /** Bytes from the server held back from the target (see fromServer); within the window granted. */
  private toTarget: Buffer[] = [];
  /** Writes what is held once it has waited holdMaxMs (boundReached). */
  private holdTimer: NodeJS.Timeout | undefined;
  private flushQueued = false;
  private ended = false;
  /** How the target ended when it failed (a reset) with bytes still held: sent with the CLOSE. */
  private endError: string | undefined;
  private closed = false;
  private closeTimer: NodeJS.Timeout | undefined;
  /** Bytes read from the target and written to it, for the debug line when it closes. */
  private readBytes = 0;
  private writtenBytes = 0;
  /** Bytes were held past the bound because the target's program had closed (the debug line). */
  private heldPastBound = false;

  constructor(
    private readonly conn: TargetOwner,
    private readonly socket: Socket,
    readonly connectID: Int64,
    readonly trace: string,
    private readonly address: string,
  ) {
    this.flow = new ConnectionFlow({
      negotiated: conn.flowControl,
      window: INITIAL_WINDOW,
      maxWindow: MAX_WINDOW,
      budget: conn.windowBudget,
      bufferLimit: conn.upstreamBufferLimit,
    });
  }

  start(): void {
    const s = this.socket;
    s.setNoDelay(true);
    s.on('data', (buf: Buffer) => this.fromTarget(buf));
    s.on('end', () => {
      this.ended = true;
      // It closed: what it had not been sent yet it would never read.
      this.dropHeld();
      if (this.flow.heldLength === 0) this.finish();
    });
    s.on('error', (err: NodeJS.ErrnoException) => {
      const error = ERROR_TEXT[err.code ?? ''] ?? err.message;
      // A reset after its last bytes (a target closing with unread bytes): what was read is
      // still sent, as after 'end', and then the error with the CLOSE (none after a clean 'end').
      if (this.flow.heldLength > 0) {
        if (!this.ended) this.endError = error;
        this.ended = true;
        this.dropHeld();
        return;
      }
      this.finish(error);
    });
    s.on('close', () => {
      // Ended with bytes still waiting for credit: finish once they are sent (grant).
      if (this.ended && this.flow.heldLength > 0) return;
      this.finish(this.ended ? this.endError : 'connection closed');
    });
  }

  private fromTarget(buf: Buffer): void {
    this.readBytes += buf.length;
    for (let off = 0; off < buf.length; off += MAX_DATA_CHUNK) {
      const part = this.flow.take(buf.length <= MAX_DATA_CHUNK ? buf : buf.subarray(off, off + MAX_DATA_CHUNK));
      if (part) this.conn.send(packets.data(this.connectID, part));
    }
    if (!this.paused && (!this.flow.open || !this.conn.writable)) {
      this.paused = true;
      this.socket.pause();
    }
    if (this.toTarget.length > 0) this.queueFlush();
  }

  maybeResume(): void {
    if (this.paused && !this.closed && this.flow.open && this.conn.writable) {
      this.paused = false;
      this.socket.resume();
      if (this.toTarget.length > 0) this.queueFlush();
    }
  }

  grant(bytes: number): void {
    if (this.closed) return;
    for (const part of this.flow.grant(bytes)) this.conn.send(packets.data(this.connectID, part));
    if (this.ended && this.flow.heldLength === 0) this.finish(this.endError);
    else this.maybeResume();
  }

  fromServer(buf: Buffer): void {
    if (this.closed || buf.length === 0) return;
    const len = buf.length;
    if (!this.flow.received(len)) {
      this.conn.log.warn(
        { trace: this.trace, serverId: this.conn.serverId, connectID: this.connectID, buffered: this.flow.unflushed },
        'target is not reading; closing this connection to protect the others',
      );
      this.finish(`target is not reading: more than ${this.flow.opts.bufferLimit} bytes buffered for this connection`);
      return;
    }
    // A target may close while its last bytes still wait, in its kernel or ours, behind our
    // paused reading (no credit: a slow link) or behind reads still under way. A write to it then
    // draws a reset, which throws those bytes away on both sides: kubectl cp over a slow link
    // ended short. So while reading is paused, or bytes from the target wait unread, what the
    // server sends for the target is held (no more than the window it was granted), and written
    // once reading has caught up with a target that is still open, or after holdMaxMs if it keeps
    // sending (see boundReached). Only where the addon can tell when the target is quiet (one
    // ioctl per packet from the server while reading runs).
    if (this.toTarget.length > 0 || (this.paused ? nativeAddon() !== null : tcpUnread(this.socket) === true)) {
      this.toTarget.push(buf);
      // Ending and closing stop this timer (dropHeld, markClosed).
      this.holdTimer ??= setTimeout(() => void this.boundReached(), this.conn.holdMaxMs);
      return;
    }
    this.write(buf);
  }

  private write(buf: Buffer): void {
    const len = buf.length;
    this.writtenBytes += len;
    this.socket.write(buf, () => this.flushed(len));
  }

  /** In QUIET_MS, after the reads that brings: write what is held if the target is quiet. */
  private queueFlush(): void {
    if (this.flushQueued) return;
    this.flushQueued = true;
    setTimeout(() => {
      this.flushQueued = false;
      if (this.closed || this.ended || this.paused || this.toTarget.length === 0) return;
      // Unread bytes: their 'data' queues the next try. The target's FIN: 'end' drops the rest.
      if (tcpQuiet(this.socket) === false) return;
      this.writeHeld();
    }, QUIET_MS);
  }

  /**
   * The hold's bound: a target that never stops sending (a shell's `yes`, a `cat` of a large file)
   * is never read dry across a slow link, and the client's Ctrl-C must still reach it. But a
   * target whose program has closed while megabytes are still on their way to us (kubelet once a
   * copy's tar exited, the link slower than the copy) would answer with a reset that throws them
   * away; the kernel's table tells that apart where the target is on this host (kubelet is), and
   * its bytes are held until its end arrives.
   */
  private async boundReached(): Promise<void> {
    this.holdTimer = undefined;
    const s = this.socket;
    const closedByProgram = await peerClosedByProgram(
      { address: s.localAddress ?? '', port: s.localPort ?? 0 },
      { address: s.remoteAddress ?? '', port: s.remotePort ?? 0 },
    );
    // Meanwhile it may have ended, been closed, or had what was held written.
    if (this.closed || this.ended || this.toTarget.length === 0 || this.holdTimer) return;
    if (closedByProgram === true) {
      this.heldPastBound = true;
      this.holdTimer = setTimeout(() => void this.boundReached(), CLOSED_RECHECK_MS);
      return;
    }
    this.writeHeld();
  }

  private writeHeld(): void {
    const held = this.toTarget;
    this.dropHeld();
    for (const buf of held) this.write(buf);
  }

  /** Forgets what is held (written, or the target is gone) and stops its bound. */
  private dropHeld(): void {
    this.toTarget = [];
    clearTimeout(this.holdTimer);
    this.holdTimer = undefined;
  }

  private flushed(len: number): void {
    const grant = this.flow.flushed(len);
    if (grant > 0 && !this.closed) this.conn.send(packets.credit(this.connectID, grant));
  }

  /** CLOSE_REQ: close the target, confirm with CLOSE_RSP. */
  closeByServer(): void {
    if (this.closed) return;
    this.conn.log.debug(
      {
        trace: this.trace,
        serverId: this.conn.serverId,
        connectID: this.connectID,
        read: this.readBytes,
        written: this.writtenBytes,
      },
      'closing target on request',
    );
    this.markClosed();
    this.conn.send(packets.closeRsp(this.connectID));
    // Let written bytes reach the target, but do not wait on a target that stopped reading.
    this.writeHeld();
    this.socket.end();
    this.closeTimer = setTimeout(() => this.socket.destroy(), 2_000);
    this.closeTimer.unref();
    this.socket.once('close', () => clearTimeout(this.closeTimer));
  }

  /** The target closed (or failed): tell the server. */
  private finish(error?: string): void {
    if (this.closed) return;
    this.conn.log.debug(
      {
        trace: this.trace,
        serverId: this.conn.serverId,
        connectID: this.connectID,
        address: this.address,
        error,
        // Where its bytes stood: reading paused, held for the target (past the bound: its program had
        // closed), read but not yet credited.
        paused: this.paused,
        heldForTarget: this.toTarget.length,
        heldPastBound: this.heldPastBound,
        heldFromTarget: this.flow.heldLength,
        read: this.readBytes,
        written: this.writtenBytes,
      },
      'target closed',
    );
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
    clearTimeout(this.holdTimer);
    this.flow.release();
    this.conn.targetGone(this);
  }
}
