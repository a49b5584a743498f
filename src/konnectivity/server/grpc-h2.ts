// gRPC streams of Packets served on node:http2 directly, for kube-apiserver's ProxyService.
// grpc-js spends ~40 µs per message (bench/HISTORY.md), and every tunneled byte to or from
// kube-apiserver crosses this frontend; here a message is its 5-byte gRPC prefix and the
// protobuf, framed by hand. A DATA payload goes out as its own write behind a small header
// (never copied) and comes in as a view into the received chunk. What a gRPC server owes a
// client is kept: `content-type: application/grpc`, a status in the trailers (or a
// trailers-only response), UNIMPLEMENTED for other methods, RESOURCE_EXHAUSTED over the size
// limit, INTERNAL for a message that does not decode; no compression is offered or accepted.
import { EventEmitter } from 'node:events';
import http2 from 'node:http2';
import * as wire from '../wire/wire.ts';
import { WireWriter } from '../wire/wire.ts';
import { PacketType } from '../wire/gen/konnectivity.ts';
import { decodePacket, encodePacket, type Int64, type Packet } from '../wire/protocol.ts';
import { messageOf } from '../../base/errors.ts';

export const GrpcStatus = { OK: 0, CANCELLED: 1, RESOURCE_EXHAUSTED: 8, UNIMPLEMENTED: 12, INTERNAL: 13 } as const;

/** One bidirectional call, with the subset of grpc-js's ServerDuplexStream the frontends use. */
export interface PacketCall {
  /** False when the stream's buffer is full; `cb` once the bytes were handed to the connection. */
  write(p: Packet, cb?: () => void): boolean;
  /** Ends the call with status OK once everything written is sent. */
  end(): void;
  pause(): void;
  resume(): void;
  on(event: 'data', listener: (p: Packet) => void): this;
  on(event: 'end' | 'cancelled' | 'close', listener: () => void): this;
  on(event: 'error', listener: (err: Error & { code?: number }) => void): this;
}

const PREFIX = 5; // compressed flag, 4-byte big-endian length
const GRPC_CONTENT_TYPE = 'application/grpc';
const { HTTP2_HEADER_STATUS, HTTP2_HEADER_CONTENT_TYPE, HTTP2_HEADER_PATH, HTTP2_HEADER_METHOD } = http2.constants;

/** The gRPC prefix and a DATA Packet's protobuf up to its payload, which follows as it is. */
export function dataHeader(connectID: Int64, payloadLength: number): Buffer {
  // Data { connectID = 1; bytes data = 3 }, inside Packet { type = 1 (DATA); data = 4 }.
  const idSize = connectID === '0' ? 0 : 1 + wire.sizeInt64(connectID);
  const bytesSize = payloadLength > 0 ? 1 + wire.sizeVarint(payloadLength) + payloadLength : 0;
  const dataSize = idSize + bytesSize;
  const packetSize = 2 + 1 + wire.sizeVarint(dataSize) + dataSize;
  const w = new WireWriter(PREFIX + packetSize - payloadLength);
  w.buf[0] = 0;
  w.buf.writeUInt32BE(packetSize, 1);
  w.pos = PREFIX;
  w.varint(8);
  w.varint(PacketType.DATA);
  w.varint(34);
  w.varint(dataSize);
  if (idSize > 0) {
    w.varint(8);
    w.int64(connectID);
  }
  if (payloadLength > 0) {
    w.varint(26);
    w.varint(payloadLength);
  }
  return w.finish();
}

function framed(message: Buffer): Buffer {
  const out = Buffer.allocUnsafe(PREFIX + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  message.copy(out, PREFIX);
  return out;
}

class StatusError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Splits a stream's bytes into gRPC messages; whole messages inside one chunk are views. */
class MessageReader {
  private parts: Buffer[] = [];
  private buffered = 0;

  constructor(private readonly maxMessage: number) {}

  /** Every message completed by `chunk`, in order. Throws StatusError on a bad frame. */
  push(chunk: Buffer): Buffer[] {
    let buf = chunk;
    if (this.buffered > 0) {
      this.parts.push(chunk);
      this.buffered += chunk.length;
      if (this.buffered < PREFIX) return [];
      const need = PREFIX + this.lengthOf(this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts, PREFIX));
      if (this.buffered < need) return [];
      buf = Buffer.concat(this.parts, this.buffered);
      this.parts = [];
      this.buffered = 0;
    }
    const out: Buffer[] = [];
    let pos = 0;
    while (buf.length - pos >= PREFIX) {
      const len = this.lengthOf(buf.subarray(pos, pos + PREFIX));
      if (buf.length - pos < PREFIX + len) break;
      out.push(buf.subarray(pos + PREFIX, pos + PREFIX + len));
      pos += PREFIX + len;
    }
    if (pos < buf.length) {
      this.parts = [buf.subarray(pos)];
      this.buffered = buf.length - pos;
      if (this.buffered >= PREFIX) this.lengthOf(this.parts[0]!); // refuse an oversized frame at once
    }
    return out;
  }

  private lengthOf(prefix: Buffer): number {
    if (prefix[0] !== 0)
      throw new StatusError(
        GrpcStatus.UNIMPLEMENTED,
        'compressed messages are not supported (grpc-encoding identity only)',
      );
    const len = prefix.readUInt32BE(1);
    if (len > this.maxMessage)
      throw new StatusError(
        GrpcStatus.RESOURCE_EXHAUSTED,
        `Received message larger than max (${len} vs. ${this.maxMessage})`,
      );
    return len;
  }
}

/** Largest DATA message made of several writes (kube-apiserver accepts up to 4 MiB by default). */
const MAX_COALESCED = 1024 * 1024;

interface PendingData {
  connectID: Int64;
  parts: Buffer[];
  bytes: number;
  callbacks: (() => void)[];
}

class H2PacketCall extends EventEmitter implements PacketCall {
  /** DATA written since the last I/O poll, not yet sent: see flushPending. */
  private pending: PendingData | undefined;
  private responded = false;
  private finished = false;
  private status: number = GrpcStatus.OK;
  private message = '';
  private readonly reader: MessageReader;
  /** Messages read but not yet delivered: a paused call delivers nothing, as grpc-js's does. */
  private readonly queue: Buffer[] = [];
  private paused = false;
  private clientEnded = false;

  constructor(
    private readonly stream: http2.ServerHttp2Stream,
    maxMessage: number,
  ) {
    super();
    this.reader = new MessageReader(maxMessage);
    stream.on('data', (chunk: Buffer) => this.onChunk(chunk));
    stream.on('end', () => {
      this.clientEnded = true;
      this.deliver();
    });
    stream.on('aborted', () => this.emit('cancelled'));
    stream.on('error', (err: Error) => this.report(Object.assign(err, { code: GrpcStatus.INTERNAL })));
    stream.on('close', () => this.emit('close'));
    stream.on('wantTrailers', () => {
      const trailers: http2.OutgoingHttpHeaders = { 'grpc-status': String(this.status) };
      if (this.message) trailers['grpc-message'] = encodeURIComponent(this.message);
      stream.sendTrailers(trailers);
    });
  }

  write(p: Packet, cb?: () => void): boolean {
    if (this.finished || this.stream.destroyed) return false;
    this.respond();
    const d = p.data;
    if (p.type === 'DATA' && d && !d.error && d.data.length > 0) {
      let q = this.pending;
      if (q && (q.connectID !== d.connectID || q.bytes + d.data.length > MAX_COALESCED)) q = this.flushPending();
      if (!q) {
        q = this.pending = { connectID: d.connectID, parts: [], bytes: 0, callbacks: [] };
        setImmediate(() => this.flushPending());
      }
      q.parts.push(d.data);
      q.bytes += d.data.length;
      if (cb) q.callbacks.push(cb);
      return this.stream.writableLength < this.stream.writableHighWaterMark;
    }
    this.flushPending();
    return this.stream.write(framed(encodePacket(p)), cb);
  }

  /**
   * Writes the DATA collected since the last I/O poll as one gRPC message: its header, then the
   * payloads as they are (no copy). The pieces one agent read brought (TLS hands them over 16 KiB
   * at a time) so reach the client as one message, and it pays per message.
   */
  private flushPending(): undefined {
    const q = this.pending;
    this.pending = undefined;
    if (!q || this.stream.destroyed) return;
    const callbacks = q.callbacks;
    const flushed = callbacks.length === 0 ? undefined : () => callbacks.forEach((c) => c());
    this.stream.cork();
    this.stream.write(dataHeader(q.connectID, q.bytes));
    q.parts.forEach((part, i) => this.stream.write(part, i === q.parts.length - 1 ? flushed : undefined));
    this.stream.uncork();
  }

  end(): void {
    this.flushPending();
    this.finish(GrpcStatus.OK, '');
  }

  pause(): void {
    this.paused = true;
    this.stream.pause();
  }

  resume(): void {
    this.paused = false;
    this.deliver();
    if (!this.paused) this.stream.resume();
  }

  /** Ends the call with `status`: in the trailers, or as a trailers-only response. */
  finish(status: number, message: string): void {
    if (this.finished || this.stream.destroyed) return;
    this.finished = true;
    this.pending = undefined; // end() sent it first; after an error it is dropped with the call
    if (!this.responded) {
      this.responded = true;
      const headers: http2.OutgoingHttpHeaders = {
        [HTTP2_HEADER_STATUS]: 200,
        [HTTP2_HEADER_CONTENT_TYPE]: GRPC_CONTENT_TYPE,
        'grpc-status': String(status),
      };
      if (message) headers['grpc-message'] = encodeURIComponent(message);
      this.stream.respond(headers, { endStream: true });
      return;
    }
    this.status = status;
    this.message = message;
    this.stream.end();
  }

  private respond(): void {
    if (this.responded) return;
    this.responded = true;
    this.stream.respond(
      { [HTTP2_HEADER_STATUS]: 200, [HTTP2_HEADER_CONTENT_TYPE]: GRPC_CONTENT_TYPE },
      { waitForTrailers: true },
    );
  }

  private onChunk(chunk: Buffer): void {
    if (this.finished) return;
    try {
      for (const m of this.reader.push(chunk)) this.queue.push(m);
    } catch (err) {
      this.fail(err as StatusError);
      return;
    }
    this.deliver();
  }

  /** Hands queued messages to the handler until it pauses; then the client's end, once all are out. */
  private deliver(): void {
    while (!this.paused && this.queue.length > 0) {
      if (this.finished) return;
      let p: Packet;
      try {
        p = decodePacket(this.queue.shift()!);
      } catch (err) {
        this.fail(new StatusError(GrpcStatus.INTERNAL, `Failed to deserialize a Packet: ${messageOf(err)}`));
        return;
      }
      this.emit('data', p);
    }
    if (this.clientEnded && this.queue.length === 0 && !this.paused) {
      this.clientEnded = false;
      this.emit('end');
    }
  }

  /** A bad frame from the client: the call ends with that status, and is lost to its handler. */
  private fail(err: StatusError): void {
    this.finish(err.status, err.message);
    this.report(Object.assign(new Error(err.message), { code: err.status }));
  }

  /** A handler that does not listen for errors still has its call ended; the server never throws. */
  private report(err: Error & { code: number }): void {
    if (this.listenerCount('error') > 0) this.emit('error', err);
  }
}

export interface PacketServerOptions {
  /** gRPC path (`/Service/Method`) -> handler of each new call. */
  methods: Record<string, (call: PacketCall) => void>;
  /** Largest message accepted, in bytes. */
  maxMessage: number;
}

/**
 * HTTP/2 settings: a wide stream window and large frames, since one stream is one tunneled
 * connection. The connection window stays at HTTP/2's default: a grpc-js client that wrote into a
 * 16 MiB connection window while it read stalled both directions in the tunnel tests.
 */
const SETTINGS: http2.Settings = { initialWindowSize: 4 * 1024 * 1024, maxFrameSize: 64 * 1024 };

function onStream(o: PacketServerOptions, stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
  const handler = o.methods[String(headers[HTTP2_HEADER_PATH])];
  const contentType = String(headers[HTTP2_HEADER_CONTENT_TYPE] ?? '');
  stream.on('error', () => {}); // a reset stream; the call's own listener, if any, reports it
  if (headers[HTTP2_HEADER_METHOD] !== 'POST' || !contentType.startsWith(GRPC_CONTENT_TYPE)) {
    stream.respond({ [HTTP2_HEADER_STATUS]: 415 }, { endStream: true });
    return;
  }
  const call = new H2PacketCall(stream, o.maxMessage);
  if (!handler) {
    call.finish(GrpcStatus.UNIMPLEMENTED, `unknown method ${String(headers[HTTP2_HEADER_PATH])}`);
    stream.resume();
    return;
  }
  handler(call);
}

/** A listening HTTP/2 server and its open sessions, for a graceful or an immediate close. */
export class PacketServer {
  private readonly sessions = new Set<http2.ServerHttp2Session>();

  constructor(
    readonly server: http2.Http2Server | http2.Http2SecureServer,
    o: PacketServerOptions,
  ) {
    server.on('stream', (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) =>
      onStream(o, stream, headers),
    );
    server.on('session', (session: http2.ServerHttp2Session) => {
      session.on('error', () => {}); // a peer gone mid-frame; its streams report it
      this.sessions.add(session);
      session.once('close', () => this.sessions.delete(session));
    });
  }

  /** No new connections; open ones get GOAWAY and finish their calls. Resolves when all are gone. */
  drained(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const s of this.sessions) s.close();
    return closed;
  }

  /** Every connection dropped at once. */
  close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const s of this.sessions) s.destroy();
    return closed;
  }
}

/** A cleartext (h2c, prior knowledge) server, as kube-apiserver speaks it on a unix socket. */
export function packetServer(o: PacketServerOptions): PacketServer {
  return new PacketServer(http2.createServer({ settings: SETTINGS }), o);
}

/** The same behind mutual TLS: the client must present a certificate of `tls.ca`. */
export function securePacketServer(
  o: PacketServerOptions,
  tls: { cert: Buffer; key: Buffer; ca: Buffer },
): PacketServer {
  return new PacketServer(
    http2.createSecureServer({ settings: SETTINGS, ...tls, requestCert: true, rejectUnauthorized: true }),
    o,
  );
}
