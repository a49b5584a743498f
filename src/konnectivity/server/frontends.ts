// The two ways kube-apiserver reaches the server: a ProxyService.Proxy gRPC stream per dial
// (egress selector GRPC mode), or an HTTP CONNECT request per dial (HTTPConnect mode). Both
// are thin adapters onto the broker; each tunnel is its own stream or socket, so pausing one
// (when its agent-side credit runs out) never slows another.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from '../../base/log.ts';
import { NO_AGENT, type Broker } from './broker.ts';
import type { Frontend, Tunnel } from './tunnel.ts';
import type { DialFailureReason, ServerMetrics } from './metrics.ts';
import type { PacketCall } from './grpc-h2.ts';
import {
  ProxyServiceDefinition,
  describePacket,
  isId,
  newRandom,
  packets,
  type Int64,
  type Packet,
} from '../wire/protocol.ts';

export const PROXY_METHOD = ProxyServiceDefinition.Proxy.path;

/** One kube-apiserver Proxy stream: DIAL_REQ first, then DATA / CLOSE_REQ / DIAL_CLS. */
export function serveProxyStream(
  call: PacketCall,
  broker: Broker,
  metrics: ServerMetrics,
  log: Logger,
  onDone: () => void,
): void {
  let tunnel: Tunnel | null = null;
  /** Cancels the dial while it waits for its agent. */
  let waiting: (() => void) | undefined;
  let random: Int64 = '0';
  let connectID: Int64 = '0';
  let ended = false;
  let gone = false;

  const endCall = (): void => {
    if (ended) return;
    ended = true;
    call.end();
  };
  const send = (p: Packet): void => {
    if (gone || ended) return;
    metrics.packet('to_client', p.type);
    call.write(p);
  };

  const frontend: Frontend = {
    kind: 'grpc',
    established(id) {
      connectID = id;
      send(packets.dialRsp(random, id));
    },
    dialFailed(message) {
      send(packets.dialRsp(random, '0', message));
      endCall();
    },
    write(buf, flushed) {
      if (gone || ended) return;
      metrics.packet('to_client', 'DATA');
      const started = process.hrtime.bigint();
      call.write(packets.data(connectID, buf), () => {
        metrics.frontendWriteDuration.observe(Number(process.hrtime.bigint() - started) / 1e9);
        flushed();
      });
    },
    close(error) {
      send(packets.closeRsp(connectID, error));
      endCall();
    },
    pauseReading() {
      call.pause();
    },
    resumeReading() {
      call.resume();
    },
  };

  call.on('data', (p: Packet) => {
    metrics.packet('from_client', p.type);
    switch (p.type) {
      case 'DIAL_REQ':
        if (tunnel !== null || waiting || !p.dialRequest) {
          log.debug(describePacket(p), 'ignoring a second DIAL_REQ on one Proxy stream');
          return;
        }
        random = p.dialRequest.random;
        waiting = broker.dials.dial(frontend, p.dialRequest, (t) => {
          waiting = undefined;
          tunnel = t;
        });
        return;
      case 'DATA': {
        const id = p.data?.connectID ?? '0';
        if (tunnel === null || tunnel.state === 'pending') return; // nothing to send it to yet
        if (id !== connectID) {
          // One connection per Proxy stream: DATA for another id is a client bug; close it.
          if (isId(id)) send(packets.closeRsp(id, `unknown connectID ${id} on this stream`));
          broker.frontendClose(tunnel);
          return;
        }
        if (p.data && p.data.data.length > 0) broker.fromFrontend(tunnel, p.data.data);
        return;
      }
      case 'CLOSE_REQ': {
        const id = p.closeRequest?.connectID ?? '0';
        if (tunnel === null || id !== connectID) {
          send(packets.closeRsp(id, `unknown connectID ${id}`));
          return;
        }
        broker.frontendClose(tunnel);
        return;
      }
      case 'DIAL_CLS':
        if (tunnel !== null && p.closeDial?.random === random) broker.frontendCancel(tunnel);
        waiting?.();
        endCall();
        return;
      default:
        log.debug(describePacket(p), 'ignoring unexpected packet from frontend');
    }
  });
  call.on('end', () => {
    // The client half-closed: it sends nothing more, so the tunnel is over.
    waiting?.();
    if (tunnel === null || tunnel.state === 'done') endCall();
    else broker.frontendClose(tunnel);
  });
  const lost = (): void => {
    if (gone) return;
    gone = true;
    waiting?.();
    if (tunnel !== null) broker.frontendGone(tunnel);
    onDone();
  };
  call.on('cancelled', lost);
  call.on('error', (err) => {
    log.debug({ err: err.message }, 'Proxy stream error');
    metrics.streamFailed('from_client', err.code);
    lost();
  });
  call.on('close', lost);
}

function httpStatusFor(reason: DialFailureReason, message: string): number {
  if (reason === 'no_agent') return 500;
  if (reason === 'bad_request') return 400;
  if (reason === 'timeout' || /timeout|timed out/i.test(message)) return 504;
  if (/too many open files/i.test(message)) return 503;
  return 502;
}

/**
 * The status line's reason phrase carries why the dial failed: kube-apiserver reports a failed
 * CONNECT by its status line alone ("code 500: 500 No agent available: ..."), never the body.
 * One line of printable ASCII, as HTTP/1.1 allows there.
 */
export function reasonPhrase(message: string): string {
  const line = message.replace(/[^\x21-\x7e]+/g, ' ').trim();
  return (line.length > 200 ? `${line.slice(0, 197)}...` : line) || 'dial failed';
}

/** One CONNECT request: 200 only once the agent's DIAL_RSP succeeded, then raw bytes. */
export function serveHttpConnect(
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  broker: Broker,
  metrics: ServerMetrics,
  log: Logger,
  closeGraceMs: number,
): void {
  let tunnel: Tunnel | null = null;
  let gone = false;
  metrics.httpConnections.inc();
  socket.pause();
  socket.on('error', (err) => log.debug({ err: err.message }, 'HTTP-CONNECT socket error'));

  const endSocket = (): void => {
    socket.end();
    // A client that stopped reading would keep the socket open forever.
    const t = setTimeout(() => socket.destroy(), closeGraceMs);
    t.unref();
    socket.once('close', () => clearTimeout(t));
  };

  const frontend: Frontend = {
    kind: 'http-connect',
    established() {
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      const t = tunnel;
      if (t === null) return;
      if (head.length > 0) broker.fromFrontend(t, head);
      socket.on('data', (buf: Buffer) => broker.fromFrontend(t, buf));
      if (!t.readingPaused) socket.resume();
    },
    dialFailed(message, reason) {
      const code = httpStatusFor(reason, message);
      const body = reason === 'no_agent' ? `currently no tunnels available: ${message}` : message;
      if (!gone)
        socket.write(
          `HTTP/1.1 ${code} ${reasonPhrase(message)}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
        );
      endSocket();
    },
    write(buf, flushed) {
      if (gone) return;
      socket.write(buf, () => flushed());
    },
    close() {
      endSocket();
    },
    pauseReading() {
      socket.pause();
    },
    resumeReading() {
      socket.resume();
    },
  };

  let waiting: (() => void) | undefined;
  socket.on('end', () => {
    if (waiting) {
      waiting();
      endSocket();
    }
    if (tunnel !== null) broker.frontendClose(tunnel);
  });
  socket.on('close', () => {
    metrics.httpConnections.dec();
    gone = true;
    waiting?.();
    if (tunnel !== null) broker.frontendGone(tunnel);
  });
  const dial = { protocol: 'tcp', address: req.url ?? '', random: newRandom(), kctlTraceID: '' };
  waiting = broker.dials.dial(frontend, dial, (t) => {
    waiting = undefined;
    tunnel = t;
  });
}

/** Anything but CONNECT on the HTTP-CONNECT socket. */
export function refuseNonConnect(_req: IncomingMessage, res: ServerResponse): void {
  res.writeHead(405, { 'Content-Type': 'text/plain; charset=utf-8', Allow: 'CONNECT' });
  res.end('only CONNECT is supported\n');
}

export { NO_AGENT };
