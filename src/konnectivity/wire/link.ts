// kctl-tunnel/1: the agent stream between a kctl agent and a kctl server without gRPC.
// Both ends are ours, so the one TLS connection an agent holds to a server carries Packets in
// plain length-prefixed frames instead of gRPC messages on an HTTP/2 stream. A DATA payload
// goes out behind a few header bytes (no copy: TLS reads it from the caller's buffer) and comes
// in as views of the received TLS records, delivered piece by piece as they arrive, so no frame
// is ever reassembled. Upstream peers never see it: it is chosen by ALPN in the TLS handshake
// (server/agent-port.ts, agent/connection.ts), and either side without it speaks h2 and gRPC.
//
// frame := length:u32be kind:u8 body        length = 1 + body length
//   HELLO    agent -> server, first: the Connect metadata as JSON {name: [values]}
//   HEADERS  server -> agent, once authenticated: the response headers, same JSON
//   STATUS   server -> agent, last: {"code": gRPC status, "details": text} when refused
//   PACKET   either way: one protobuf Packet (anything but a plain DATA)
//   DATA     either way: idLength:u8 connectID (decimal ASCII) payload
import { EventEmitter } from 'node:events';
import type { TLSSocket } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { decodePacket, encodePacket, type Packet } from './protocol.ts';
import { messageOf } from '../../base/errors.ts';

/** The ALPN protocol id a kctl agent offers before h2, and a kctl server prefers. */
export const LINK_ALPN = 'kctl-tunnel/1';

export const FRAME = { HELLO: 1, HEADERS: 2, STATUS: 3, PACKET: 4, DATA: 5 } as const;

/** Largest frame body: a Packet as big as the gRPC path allows (16 MiB) and its header. */
export const MAX_FRAME = 16 * 1024 * 1024 + 1024;
/** Largest HELLO / HEADERS / STATUS body. */
const MAX_META_FRAME = 64 * 1024;
/** Buffered bytes above which write() says stop (the socket's own mark, 16 KiB, is one DATA chunk). */
const LINK_HIGH_WATER = 1024 * 1024;

export class LinkProtocolError extends Error {}

/**
 * Splits received bytes into frames. DATA payloads are handed on as views, in as many pieces as
 * the records they arrived in; other bodies are views too unless they span records.
 */
export class FrameReader {
  private readonly head = Buffer.alloc(5);
  private headHave = 0;
  private kind = 0;
  private bodyLeft = 0;
  private bodyParts: Buffer[] = [];
  private idLength = -1;
  private id = '';
  private idBytes: Buffer[] = [];
  private idHave = 0;
  /** Set (from onFrame) to stop at the end of the current frame; push() then returns the rest. */
  stopped = false;

  constructor(
    private readonly onFrame: (kind: number, body: Buffer) => void,
    private readonly onData: (connectID: string, piece: Buffer) => void,
  ) {}

  /**
   * Throws LinkProtocolError on a malformed frame; the link must then be closed. Returns the
   * bytes not read yet when `stopped` was set on the way.
   */
  push(chunk: Buffer): Buffer | undefined {
    let off = 0;
    while (off < chunk.length) {
      if (this.stopped) return chunk.subarray(off);
      if (this.headHave < 5) {
        const n = Math.min(5 - this.headHave, chunk.length - off);
        chunk.copy(this.head, this.headHave, off, off + n);
        this.headHave += n;
        off += n;
        if (this.headHave === 5) this.startFrame();
        continue;
      }
      if (this.kind === FRAME.DATA && this.idLength < 0) {
        this.idLength = chunk[off++]!;
        this.bodyLeft--;
        if (this.idLength === 0 || this.idLength > this.bodyLeft)
          throw new LinkProtocolError(`DATA frame with a connectID of ${this.idLength} bytes`);
        continue;
      }
      if (this.kind === FRAME.DATA && this.idHave < this.idLength) {
        const n = Math.min(this.idLength - this.idHave, chunk.length - off);
        this.idBytes.push(chunk.subarray(off, off + n));
        this.idHave += n;
        this.bodyLeft -= n;
        off += n;
        if (this.idHave === this.idLength) {
          this.id = Buffer.concat(this.idBytes).toString('latin1');
          this.idBytes = [];
          if (!/^[0-9]+$/.test(this.id))
            throw new LinkProtocolError('DATA frame with a connectID that is not a decimal number');
          if (this.bodyLeft === 0) this.endFrame();
        }
        continue;
      }
      const n = Math.min(this.bodyLeft, chunk.length - off);
      const piece = chunk.subarray(off, off + n);
      off += n;
      this.bodyLeft -= n;
      if (this.kind === FRAME.DATA) this.onData(this.id, piece);
      else this.bodyParts.push(piece);
      if (this.bodyLeft === 0) this.endFrame();
    }
    return undefined;
  }

  private startFrame(): void {
    const length = this.head.readUInt32BE(0);
    this.kind = this.head[4]!;
    if (length < 1 || length - 1 > MAX_FRAME)
      throw new LinkProtocolError(`frame of ${length} bytes (at most ${MAX_FRAME + 1})`);
    if (this.kind < FRAME.HELLO || this.kind > FRAME.DATA)
      throw new LinkProtocolError(`unknown frame kind ${this.kind}`);
    if (this.kind <= FRAME.STATUS && length - 1 > MAX_META_FRAME)
      throw new LinkProtocolError(`metadata frame of ${length} bytes`);
    this.bodyLeft = length - 1;
    if (this.kind === FRAME.DATA && this.bodyLeft === 0) throw new LinkProtocolError('DATA frame without a connectID');
    if (this.bodyLeft === 0) this.endFrame();
  }

  private endFrame(): void {
    const kind = this.kind;
    const parts = this.bodyParts;
    this.headHave = 0;
    this.bodyParts = [];
    this.idLength = -1;
    this.idHave = 0;
    if (kind !== FRAME.DATA) this.onFrame(kind, parts.length === 1 ? parts[0]! : Buffer.concat(parts));
  }
}

function frameHead(kind: number, bodyLength: number, extra = 0): Buffer {
  const h = Buffer.allocUnsafe(5 + extra);
  h.writeUInt32BE(1 + bodyLength, 0);
  h[4] = kind;
  return h;
}

/** One frame as bytes (tests, and the small frames). */
export function encodeFrame(kind: number, body: Buffer): Buffer {
  return Buffer.concat([frameHead(kind, body.length), body]);
}

export function metadataJson(md: grpc.Metadata): Buffer {
  const out: Record<string, string[]> = {};
  for (const k of Object.keys(md.getMap())) out[k] = md.get(k).map(String);
  return Buffer.from(JSON.stringify(out));
}

export function metadataFromJson(body: Buffer): grpc.Metadata {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    throw new LinkProtocolError('metadata frame is not JSON');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    throw new LinkProtocolError('metadata frame is not a JSON object');
  const md = new grpc.Metadata();
  for (const [k, values] of Object.entries(parsed)) {
    if (!Array.isArray(values) || !values.every((v) => typeof v === 'string'))
      throw new LinkProtocolError(`metadata ${k} is not a list of strings`);
    // Metadata.add validates names the way gRPC does; a name it refuses is a bad peer.
    try {
      for (const v of values) md.add(k, v);
    } catch (err) {
      throw new LinkProtocolError(`metadata ${k}: ${messageOf(err)}`);
    }
  }
  return md;
}

/**
 * The frames of one TLS connection, both ends. Emits 'packet' (Packet), 'frame' (kind, body) for
 * the metadata frames, 'drain', 'end' when the peer half-closed, and 'closed' (error text, or
 * undefined for a clean close) once, when the connection is gone.
 */
export class Link extends EventEmitter {
  private readonly reader: FrameReader;
  private done = false;
  private held: Buffer | undefined;

  constructor(readonly socket: TLSSocket) {
    super();
    this.reader = new FrameReader(
      (kind, body) => {
        if (kind !== FRAME.PACKET) return void this.emit('frame', kind, body);
        let p: Packet;
        try {
          p = decodePacket(body);
        } catch (err) {
          throw new LinkProtocolError(`undecodable Packet: ${messageOf(err)}`);
        }
        this.emit('packet', p);
      },
      (connectID, piece) =>
        this.emit('packet', { type: 'DATA', data: { connectID, error: '', data: piece } } satisfies Packet),
    );
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.read(chunk));
    socket.on('drain', () => this.emit('drain'));
    socket.on('end', () => this.emit('end'));
    socket.on('error', (err: Error) => this.fail(err.message));
    socket.on('close', () => this.finish());
  }

  private read(chunk: Buffer): void {
    if (this.done) return;
    try {
      this.held = this.reader.push(chunk);
      if (this.held) this.socket.pause();
    } catch (err) {
      if (!(err instanceof LinkProtocolError)) throw err;
      this.fail(`protocol error: ${err.message}`);
    }
  }

  /**
   * Called from a 'frame' listener: nothing after this frame is read until resume(), not even
   * the rest of the bytes it came with (the server authenticates a HELLO before it listens on).
   */
  hold(): void {
    this.reader.stopped = true;
  }

  resume(): void {
    if (!this.reader.stopped) return;
    this.reader.stopped = false;
    const held = this.held;
    this.held = undefined;
    if (held) this.read(held);
    if (!this.reader.stopped) this.socket.resume();
  }

  /** False once LINK_HIGH_WATER bytes wait to be sent: stop until 'drain'. */
  write(p: Packet, flushed?: () => void): boolean {
    const s = this.socket;
    if (this.done || s.destroyed) return false;
    const d = p.data;
    if (p.type === 'DATA' && d && d.error === '' && d.connectID.length > 0 && d.connectID.length < 256) {
      const id = d.connectID;
      const head = frameHead(FRAME.DATA, 1 + id.length + d.data.length, 1 + id.length);
      head[5] = id.length;
      head.write(id, 6, 'latin1');
      s.cork();
      s.write(head);
      s.write(d.data, flushed);
      s.uncork();
    } else {
      s.write(encodeFrame(FRAME.PACKET, encodePacket(p)), flushed);
    }
    return s.writableLength < LINK_HIGH_WATER;
  }

  writeFrame(kind: number, body: Buffer): void {
    if (!this.done && !this.socket.destroyed) this.socket.write(encodeFrame(kind, body));
  }

  /** Half-closes after what was written; the peer answers with its own end. */
  end(): void {
    if (!this.socket.destroyed) this.socket.end();
  }

  /** Drops the connection now. */
  destroy(): void {
    this.socket.destroy();
    this.finish();
  }

  get closed(): boolean {
    return this.done;
  }

  /** Drops the connection now, for `why`. */
  fail(why: string): void {
    this.socket.destroy();
    this.finish(why);
  }

  /** `error` is undefined for a connection that closed cleanly. */
  private finish(error?: string): void {
    if (this.done) return;
    this.done = true;
    this.emit('closed', error);
  }
}
