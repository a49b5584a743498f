// The server's agent port: TLS that asks for a client certificate without requiring one
// (token-only agents get through the handshake; authenticateAgent decides), Nagle off on every
// accepted socket, and HTTP/2 receive windows wide enough that the shared agent stream, which
// is never paused, does not wait a round trip per 64 KiB.
import { EventEmitter } from 'node:events';
import type { ServerHttp2Session } from 'node:http2';
import { createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import type * as grpc from '@grpc/grpc-js';
import { ServerCredentials, experimental } from '@grpc/grpc-js';

/** The agent stream is never paused (per-connection credit does that job). */
const AGENT_STREAM_WINDOW = 8 * 1024 * 1024;
const AGENT_SESSION_WINDOW = 16 * 1024 * 1024;

/**
 * Certificates that never change, through grpc-js's provider interface: the only way it offers
 * to ask for a client certificate without requiring one (createSsl does either or neither).
 * Updates are delivered on the next tick: grpc-js registers its watcher after adding listeners.
 */
class StaticCerts implements experimental.CertificateProvider {
  constructor(
    private readonly ca: Buffer,
    private readonly cert: Buffer,
    private readonly key: Buffer,
  ) {}
  addCaCertificateListener(l: experimental.CaCertificateUpdateListener): void {
    setImmediate(() => l({ caCertificate: this.ca }));
  }
  removeCaCertificateListener(): void {}
  addIdentityCertificateListener(l: experimental.IdentityCertificateUpdateListener): void {
    setImmediate(() => l({ certificate: this.cert, privateKey: this.key }));
  }
  removeIdentityCertificateListener(): void {}
}

export interface AgentPortTls {
  /** Client certificates are checked against it; without it none are asked for. */
  ca?: Buffer;
  cert: Buffer;
  key: Buffer;
  /** Refuse a handshake without a client certificate of `ca` (upstream's agent port with a CA). */
  requireClientCert?: boolean;
}

/**
 * Our own listener hands accepted sockets to grpc-js (its public connection injector), so they
 * get TCP_NODELAY, which grpc-js leaves off on the server side: a small DIAL_REQ or CLOSE_REQ
 * behind an unacknowledged write would wait for the agent's ACK (Go servers disable Nagle).
 */
export class AgentListener {
  private readonly listener: NetServer;
  private readonly sockets = new Set<Socket>();

  constructor(server: grpc.Server, tls: AgentPortTls) {
    const creds = tls.ca
      ? experimental.createCertificateProviderServerCredentials(
          new StaticCerts(tls.ca, tls.cert, tls.key),
          new StaticCerts(tls.ca, tls.cert, tls.key),
          tls.requireClientCert ?? false,
        )
      : ServerCredentials.createSsl(null, [{ cert_chain: tls.cert, private_key: tls.key }], false);
    const injector = server.createConnectionInjector(creds);
    widenReceiveWindows(server, AGENT_STREAM_WINDOW, AGENT_SESSION_WINDOW);
    this.listener = createNetServer({ noDelay: true }, (socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
      socket.on('error', () => {}); // reported on the TLS session grpc-js runs over it
      injector.injectConnection(socket);
    });
  }

  /** Resolves with the port bound (useful with port 0). Host '' is every interface, as in Go. */
  listen(port: number, host: string): Promise<number> {
    const server = this.listener;
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void =>
        reject(new Error(`konnectivity server cannot listen on ${host.includes(':') ? `[${host}]` : host || '*'}:${port}: ${err.message}`));
      server.once('error', onError);
      server.listen({ port, host: host || undefined }, () => {
        server.off('error', onError);
        resolve((server.address() as AddressInfo).port);
      });
    });
  }

  /** Stops accepting; the gRPC server's shutdown then closes the sessions. */
  close(): void {
    this.listener.close();
  }

  /** Drops sockets the gRPC shutdown did not close (a TLS handshake still under way). */
  destroySockets(): void {
    for (const s of this.sockets) s.destroy();
  }
}

/** Raises the HTTP/2 receive windows of every session a grpc-js server accepts. */
function widenReceiveWindows(server: grpc.Server, streamWindow: number, sessionWindow: number): void {
  // grpc-js limitation: no server option and no public hook reach its HTTP/2 sessions (grpc/grpc-node#3058
  // would add one), so this reads its private http2Servers and checks what it finds instead of casting.
  const http2Servers: unknown = server['http2Servers'];
  if (!(http2Servers instanceof Map)) return;
  for (const h of http2Servers.keys()) {
    if (!(h instanceof EventEmitter)) continue;
    h.on('session', (session: ServerHttp2Session) => {
      session.once('localSettings', () => {
        try {
          session.setLocalWindowSize(sessionWindow);
          session.settings({ initialWindowSize: streamWindow });
        } catch {
          // the session closed already
        }
      });
    });
  }
}
