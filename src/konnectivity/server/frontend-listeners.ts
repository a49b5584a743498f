// Where kube-apiserver reaches the server: a GRPC and an HTTP-CONNECT frontend, each on a unix
// socket or on TCP with mutual TLS, every one of them handing its dials to the broker. Owns those
// listeners from bind to close, and the graceful end (no new connections, open ones finish).
import { rm } from 'node:fs/promises';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Duplex } from 'node:stream';
import type { Logger } from '../../base/log.ts';
import type { Broker } from './broker.ts';
import { PROXY_METHOD, refuseNonConnect, serveHttpConnect, serveProxyStream } from './frontends.ts';
import { packetServer, securePacketServer, type PacketServer, type PacketServerOptions } from './grpc-h2.ts';
import { bindPrivateSocket, closeHttp, listenHttp } from './listen.ts';
import type { ServerMetrics } from './metrics.ts';

/** A frontend for kube-apiserver on TCP: mutual TLS (the client must present a certificate of `tls.ca`). */
export interface TcpFrontend {
  mode: 'grpc' | 'http-connect';
  host: string;
  port: number;
  tls: { cert: Buffer; key: Buffer; ca: Buffer };
}

export interface FrontendOptions {
  /** Unix socket for GRPC mode; none when unset. */
  udsPath?: string;
  /** Unix socket for HTTP-CONNECT mode; none when unset. */
  httpConnectUdsPath?: string;
  /** Permissions of those sockets. */
  udsMode: number;
  /** A file already at a socket path is replaced; false fails the start instead. */
  replaceSockets: boolean;
  tcp?: TcpFrontend;
  /** How long a closed tunnel's socket may take to drain before it is destroyed. */
  closeGraceMs: number;
}

/** The largest message a frontend accepts, as grpc.max_receive_message_length on the agent port. */
const MAX_MESSAGE = 16 * 1024 * 1024;

export class FrontendListeners {
  private readonly grpcServers: PacketServer[] = [];
  private readonly httpServers: HttpServer[] = [];
  private readonly sockets: string[] = [];
  private readonly connectSockets = new Set<Duplex>();

  constructor(
    private readonly o: FrontendOptions,
    private readonly broker: Broker,
    private readonly metrics: ServerMetrics,
    private readonly log: Logger,
  ) {}

  async listen(): Promise<void> {
    const o = this.o;
    if (o.udsPath) {
      const frontend = this.grpcFrontend(packetServer);
      await this.bindSocket(o.udsPath, (tmp) => listenHttp(frontend.server, tmp));
    }
    if (o.httpConnectUdsPath) {
      const http = this.httpConnectFrontend(createHttpServer({ requestTimeout: 0, headersTimeout: 30_000 }));
      await this.bindSocket(o.httpConnectUdsPath, (tmp) => listenHttp(http, tmp));
    }
    const tcp = o.tcp;
    if (!tcp) return;
    if (tcp.mode === 'grpc') {
      const frontend = this.grpcFrontend((o) => securePacketServer(o, tcp.tls));
      await listenHttp(frontend.server, { host: tcp.host || undefined, port: tcp.port });
      return;
    }
    const https = this.httpConnectFrontend(
      createHttpsServer({
        ...tcp.tls,
        requestCert: true,
        rejectUnauthorized: true,
        requestTimeout: 0,
        headersTimeout: 30_000,
      }),
    );
    await listenHttp(https, { host: tcp.host || undefined, port: tcp.port });
  }

  /** Resolves once no frontend takes new connections and every open one has ended. */
  drained(): Promise<void> {
    return Promise.all([
      ...this.grpcServers.map((f) => f.drained()),
      ...this.httpServers.map((h) => new Promise<void>((r) => h.close(() => r()))),
    ]).then(() => undefined);
  }

  async close(): Promise<void> {
    for (const s of this.connectSockets) s.destroy();
    await Promise.all([...this.grpcServers.map((f) => f.close()), ...this.httpServers.map((h) => closeHttp(h))]);
    this.grpcServers.length = this.httpServers.length = 0;
    await Promise.all(this.sockets.splice(0).map((p) => rm(p, { force: true })));
  }

  /** A gRPC server with ProxyService, for kube-apiserver in GRPC mode. */
  private grpcFrontend(make: (o: PacketServerOptions) => PacketServer): PacketServer {
    const frontend = make({
      maxMessage: MAX_MESSAGE,
      methods: {
        [PROXY_METHOD]: (call) => {
          const gauge = this.metrics.grpcConnections.labels({ service_method: 'Proxy' });
          gauge.inc();
          serveProxyStream(call, this.broker, this.metrics, this.log, () => gauge.dec());
        },
      },
    });
    this.grpcServers.push(frontend);
    return frontend;
  }

  /** Routes CONNECT requests on `http` (plain or TLS) to the broker. */
  private httpConnectFrontend<S extends HttpServer>(http: S): S {
    http.on('request', refuseNonConnect);
    http.on('connect', (req, socket: Duplex, head: Buffer) => {
      this.connectSockets.add(socket);
      socket.once('close', () => this.connectSockets.delete(socket));
      serveHttpConnect(req, socket, head, this.broker, this.metrics, this.log, this.o.closeGraceMs);
    });
    this.httpServers.push(http);
    return http;
  }

  /** A unix socket for kube-apiserver, never visible with a wider mode than asked. */
  private async bindSocket(path: string, bind: (tmp: string) => Promise<void>): Promise<void> {
    await bindPrivateSocket(path, bind, { mode: this.o.udsMode, replace: this.o.replaceSockets });
    this.sockets.push(path);
  }
}
