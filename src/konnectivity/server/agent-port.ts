// The server's agent port: TLS that asks for a client certificate without requiring one
// (token-only agents get through the handshake; authenticateAgent decides), Nagle off on every
// accepted socket, and HTTP/2 receive windows wide enough that the shared agent stream, which
// is never paused, does not wait a round trip per 64 KiB, once the agent has authenticated. Until
// then a connection is held to pre-auth.ts's bounds (how many, how long, how many bytes).
import { EventEmitter } from 'node:events';
import type { ServerHttp2Session } from 'node:http2';
import { createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { createServer as createTlsServer, type Server as TlsServer, type TLSSocket } from 'node:tls';
import type * as grpc from '@grpc/grpc-js';
import { ServerCredentials } from '@grpc/grpc-js';
import type { Logger } from '../../base/log.ts';
import { LINK_ALPN } from '../wire/link.ts';
import { peerKey, PreAuthBounds, type PreAuthLimits, type Waiting } from './pre-auth.ts';

/** The agent stream is never paused (per-connection credit does that job). */
const AGENT_STREAM_WINDOW = 8 * 1024 * 1024;
const AGENT_SESSION_WINDOW = 16 * 1024 * 1024;

export interface AgentPortTls {
  /** Client certificates are checked against it; without it none are asked for. */
  ca?: Buffer;
  cert: Buffer;
  key: Buffer;
  /** Refuse a handshake without a client certificate of `ca` (upstream's agent port with a CA). */
  requireClientCert?: boolean;
}

/**
 * Our own listener does the TLS handshake and hands the connection on by the protocol the agent
 * chose (ALPN): kctl-tunnel/1 to `onLink`, h2 to grpc-js (its public connection injector, with
 * the TLS already done). Every socket gets TCP_NODELAY, which grpc-js leaves off on the server
 * side: a small DIAL_REQ or CLOSE_REQ behind an unacknowledged write would wait for the agent's
 * ACK (Go servers disable Nagle).
 */
export class AgentListener {
  private readonly listener: NetServer;
  private readonly tlsServer: TlsServer;
  private readonly sockets = new Set<Socket>();
  private readonly bounds: PreAuthBounds;
  /** Connections the front door handed on, by their local peer key: the clients it named. */
  private readonly doorClients = new Map<string, string>();

  /** Without `onLink` only h2 is offered, as upstream's server does. */
  constructor(
    server: grpc.Server,
    tls: AgentPortTls,
    preAuth: { limits: Partial<PreAuthLimits>; log: Logger },
    onLink?: (socket: TLSSocket) => void,
  ) {
    const injector = server.createConnectionInjector(ServerCredentials.createInsecure());
    const bounds = new PreAuthBounds(preAuth.limits, preAuth.log);
    this.bounds = bounds;
    boundSessions(server, bounds);
    const tlsServer = createTlsServer(
      {
        key: tls.key,
        cert: tls.cert,
        ca: tls.ca,
        // Asked for, not required (unless told): token-only agents get through the handshake and
        // authenticateAgent decides. grpc-js reports a peer certificate only when TLS verified it.
        requestCert: tls.ca !== undefined,
        rejectUnauthorized: tls.ca !== undefined && (tls.requireClientCert ?? false),
        ALPNProtocols: onLink ? [LINK_ALPN, 'h2'] : ['h2'],
        // The handshake counts against the bounds' deadline, which closes a slow one first.
        handshakeTimeout: bounds.limits.timeoutMs + 1_000,
      },
      (secure: TLSSocket) => {
        const waiting = bounds.find(secure.remoteAddress, secure.remotePort);
        if (waiting) waiting.tls = secure;
        if (onLink && secure.alpnProtocol === LINK_ALPN) {
          if (waiting) watchLink(secure, waiting, bounds);
          onLink(secure);
        } else injector.injectConnection(secure);
      },
    );
    tlsServer.on('tlsClientError', () => {}); // the socket is destroyed; the agent logs why
    this.tlsServer = tlsServer;
    this.listener = createNetServer({ noDelay: true }, (socket) => this.accept(socket));
  }

  /**
   * A connection from `client`, handed on by the host's front door (frontdoor/handoff.ts; its
   * remote end is the door): held to the same bounds, counted by the client's address.
   */
  handOff(socket: Socket, client: string): void {
    const key = peerKey(`${socket.remoteAddress ?? ''}:${socket.remotePort ?? 0}`);
    this.doorClients.set(key, client);
    socket.once('close', () => this.doorClients.delete(key));
    this.accept(socket, client);
  }

  /** How a stream from `peer` (its call's getPeer()) arrived, and from whom. */
  arrival(peer: string): { via: 'direct' | 'front-door'; client: string } {
    const key = peerKey(peer);
    const client = this.doorClients.get(key);
    return client !== undefined ? { via: 'front-door', client } : { via: 'direct', client: key.replace(/:\d+$/, '') };
  }

  private accept(socket: Socket, client?: string): void {
    this.bounds.admit(socket, client);
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
    socket.on('error', () => {}); // reported on the TLS socket over it
    this.tlsServer.emit('connection', socket);
  }

  /** Resolves with the port bound (useful with port 0). Host '' is every interface, as in Go. */
  listen(port: number, host: string): Promise<number> {
    const server = this.listener;
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void =>
        reject(
          new Error(
            `konnectivity server cannot listen on ${host.includes(':') ? `[${host}]` : host || '*'}:${port}: ${err.message}`,
          ),
        );
      server.once('error', onError);
      server.listen({ port, host: host || undefined }, () => {
        server.off('error', onError);
        resolve((server.address() as AddressInfo).port);
      });
    });
  }

  /** A renewed certificate and key for new handshakes; connections made before keep theirs and stay open. */
  setCredentials(tls: AgentPortTls): void {
    this.tlsServer.setSecureContext({ key: tls.key, cert: tls.cert, ca: tls.ca });
  }

  /** A Connect from `peer` (the call's getPeer()) authenticated: its connection is bounded no more. */
  authenticated(peer: string): void {
    this.bounds.pass(peer);
  }

  /** Whether the pre-authentication bounds closed this connection (they logged why). */
  closedBeforeAuth(socket: TLSSocket): boolean {
    return this.bounds.wasDropped(socket);
  }

  /** Stops accepting; the gRPC server's shutdown then closes the sessions. */
  close(): void {
    this.listener.close();
    this.bounds.close();
  }

  /** Drops sockets the gRPC shutdown did not close (a TLS handshake still under way). */
  destroySockets(): void {
    for (const s of this.sockets) s.destroy();
  }
}

/** kctl-tunnel/1 before authentication: every chunk read counts against the byte bound at once. */
function watchLink(secure: TLSSocket, waiting: Waiting, bounds: PreAuthBounds): void {
  const check = (): void => bounds.check(waiting);
  secure.on('data', check);
  waiting.onPass(() => secure.off('data', check));
}

/**
 * The HTTP/2 sessions of a grpc-js server: each new stream counts against its connection's bounds,
 * and the receive windows are raised once a Connect on it authenticated. Before that they stay at
 * HTTP/2's 64 KiB, so a client nobody knows cannot make the server hold megabytes.
 */
function boundSessions(server: grpc.Server, bounds: PreAuthBounds): void {
  // grpc-js limitation: no server option and no public hook reach its HTTP/2 sessions (grpc/grpc-node#3058
  // would add one), so this reads its private http2Servers and checks what it finds instead of casting.
  const http2Servers: unknown = server['http2Servers'];
  if (!(http2Servers instanceof Map)) return;
  for (const h of http2Servers.keys()) {
    if (!(h instanceof EventEmitter)) continue;
    h.on('session', (session: ServerHttp2Session) => {
      const waiting = bounds.find(session.socket?.remoteAddress, session.socket?.remotePort);
      if (!waiting) return; // closed by the bounds already
      const check = (): void => bounds.check(waiting);
      session.on('stream', check);
      let settled = false;
      let passed = false;
      session.once('localSettings', () => {
        settled = true;
        if (passed) widenReceiveWindows(session);
      });
      waiting.onPass(() => {
        session.off('stream', check);
        passed = true;
        if (settled) widenReceiveWindows(session);
      });
    });
  }
}

/** Raises an HTTP/2 session's receive windows to the agent stream's. */
function widenReceiveWindows(session: ServerHttp2Session): void {
  try {
    session.setLocalWindowSize(AGENT_SESSION_WINDOW);
    session.settings({ initialWindowSize: AGENT_STREAM_WINDOW });
  } catch {
    // the session closed already
  }
}
