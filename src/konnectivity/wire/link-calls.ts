// Both ends of a kctl-tunnel/1 agent stream (link.ts), shaped like the grpc-js Connect call each
// side already handles: the server gets a LinkAgentCall where it would get a ServerDuplexStream,
// the agent a LinkServerCall where it would get a ClientDuplexStream. Metadata, authentication,
// refusal with a status and the order of events are the same on both transports.
import { connectThrough, proxyFor } from '../../base/proxy.ts';
import { EventEmitter } from 'node:events';
import { createHash } from 'node:crypto';
import {
  checkServerIdentity,
  createSecureContext,
  connect as tlsConnect,
  type PeerCertificate,
  type SecureContext,
  type TLSSocket,
} from 'node:tls';
import { isIP } from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { joinHostPort } from '../../base/addresses.ts';
import { FRAME, LINK_ALPN, Link, LinkProtocolError, metadataFromJson, metadataJson } from './link.ts';
import { newRandom, packets, type Packet } from './protocol.ts';
import { messageOf } from '../../base/errors.ts';

/** A stream error as grpc-js reports it: a status code and its text. */
export interface CallError {
  code?: number;
  details?: string;
  message: string;
}

function callError(code: grpc.status, details: string): CallError {
  return Object.assign(new Error(`${code} ${grpc.status[code]}: ${details}`), { code, details });
}

export interface LinkKeepalive {
  /** Silence after which the server pings (KCTL_PING, which every kctl agent answers). */
  timeMs: number;
  /** Further silence after which it drops the agent. */
  timeoutMs: number;
}

/** The remote end of a socket as "host:port" ("[v6]:port"), as grpc-js's getPeer() gives it. */
export function peerOf(socket: TLSSocket): string {
  return joinHostPort(socket.remoteAddress ?? '', socket.remotePort ?? 0);
}

/** How long a refused agent has to close before the server drops it. */
const REFUSED_CLOSE_MS = 5_000;

/** The server's side: one agent on kctl-tunnel/1, after its HELLO. */
export class LinkAgentCall extends EventEmitter {
  cancelled = false;

  private constructor(
    private readonly link: Link,
    readonly metadata: grpc.Metadata,
    keepalive: LinkKeepalive,
  ) {
    super();
    // What gRPC keepalive does on the h2 transport: ping a silent agent, drop one that stays silent.
    let lastReceived = Date.now();
    link.socket.on('data', () => (lastReceived = Date.now()));
    const pinger = setInterval(
      () => {
        const silent = Date.now() - lastReceived;
        if (silent >= keepalive.timeMs + keepalive.timeoutMs)
          link.fail(`no answer from the agent for ${(silent / 1000).toFixed(1)} s`);
        else if (silent >= keepalive.timeMs) link.write(packets.ping(newRandom()));
      },
      // Checked every second: a dead agent is dropped at most 1 s after the bound, not timeMs/2 after.
      Math.max(50, Math.min(1_000, Math.floor(keepalive.timeMs / 2))),
    );
    pinger.unref();
    link.on('packet', (p: Packet) => this.emit('data', p));
    link.on('frame', (kind: number) => link.fail(`protocol error: frame kind ${kind} after HELLO`)); // metadata comes once, first
    link.on('drain', () => this.emit('drain'));
    link.on('end', () => this.emit('end'));
    link.once('closed', (error?: string) => {
      clearInterval(pinger);
      this.cancelled = true;
      if (error) this.emit('error', callError(grpc.status.UNAVAILABLE, error));
      this.emit('close');
    });
    // As with grpc-js, emitting 'error' with a status ends the call with that status.
    this.on('error', (err: CallError) => {
      if (link.closed || err.code === undefined) return;
      link.writeFrame(
        FRAME.STATUS,
        Buffer.from(JSON.stringify({ code: err.code, details: err.details ?? err.message })),
      );
      link.end();
      setTimeout(() => link.destroy(), REFUSED_CLOSE_MS).unref();
    });
  }

  /**
   * Waits for the agent's HELLO; rejects (and closes the connection) on anything else. How long it
   * may take is the agent port's to bound (server/pre-auth.ts closes a connection that does not authenticate in time).
   */
  static accept(socket: TLSSocket, keepalive: LinkKeepalive): Promise<LinkAgentCall> {
    const link = new Link(socket);
    return new Promise((resolve, reject) => {
      const fail = (why: string): void => {
        link.removeAllListeners();
        link.destroy();
        reject(new Error(why));
      };
      link.once('packet', () => fail('a packet before HELLO'));
      link.once('closed', (error?: string) => fail(error ?? 'closed before HELLO'));
      link.once('frame', (kind: number, body: Buffer) => {
        if (kind !== FRAME.HELLO) return fail(`frame kind ${kind} before HELLO`);
        let md: grpc.Metadata;
        try {
          md = metadataFromJson(body);
        } catch (err) {
          return fail(err instanceof LinkProtocolError ? err.message : String(err));
        }
        link.removeAllListeners();
        link.hold(); // until the server has authenticated the agent and listens (sendMetadata)
        resolve(new LinkAgentCall(link, md, keepalive));
      });
    });
  }

  getPeer(): string {
    return peerOf(this.link.socket);
  }

  /** The client certificate, when TLS verified it against the CA (as grpc-js reports it). */
  getAuthContext(): { transportSecurityType?: string; sslPeerCertificate?: PeerCertificate } {
    const s = this.link.socket;
    if (!s.authorized) return {};
    const cert = s.getPeerCertificate();
    return { transportSecurityType: 'ssl', sslPeerCertificate: cert.raw ? cert : undefined };
  }

  /** Sends the response headers; what the agent sent after its HELLO is read from the next turn on. */
  sendMetadata(md: grpc.Metadata): void {
    this.link.writeFrame(FRAME.HEADERS, metadataJson(md));
    setImmediate(() => this.link.resume());
  }

  write(p: Packet, flushed?: () => void): boolean {
    return this.link.write(p, flushed);
  }

  end(): void {
    this.link.end();
  }
}

/** The agent's side: one server on kctl-tunnel/1. Emits 'metadata', 'data', 'error', 'end', 'status'. */
export class LinkServerCall extends EventEmitter {
  private headers = false;
  private status: CallError | undefined;

  constructor(private readonly link: Link) {
    super();
    link.on('frame', (kind: number, body: Buffer) => {
      if (kind === FRAME.HEADERS && !this.headers) {
        this.headers = true;
        try {
          this.emit('metadata', metadataFromJson(body));
        } catch (err) {
          this.status = callError(grpc.status.INTERNAL, messageOf(err));
          link.destroy();
        }
      } else if (kind === FRAME.STATUS) {
        this.status = parseStatus(body);
      } else {
        this.status = callError(grpc.status.INTERNAL, `unexpected frame kind ${kind} from the server`);
        link.destroy();
      }
    });
    link.on('packet', (p: Packet) => this.emit('data', p));
    link.on('drain', () => this.emit('drain'));
    link.once('closed', (error?: string) => {
      if (this.status) this.emit('error', this.status);
      else if (error) this.emit('error', callError(grpc.status.UNAVAILABLE, error));
      else this.emit('end');
      this.emit('status');
    });
  }

  write(p: Packet, flushed?: () => void): boolean {
    return this.link.write(p, flushed);
  }

  /** Half-closes: the server ends its side in turn ('status' follows). */
  end(): void {
    this.link.end();
  }

  cancel(): void {
    this.link.destroy();
  }
}

function parseStatus(body: Buffer): CallError {
  try {
    const s = JSON.parse(body.toString('utf8')) as { code?: unknown; details?: unknown };
    if (typeof s.code === 'number' && typeof s.details === 'string') return callError(s.code, s.details);
  } catch {
    // below
  }
  return callError(grpc.status.INTERNAL, 'unreadable STATUS frame from the server');
}

export interface LinkDial {
  host: string;
  port: number;
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  /** The name the server certificate must carry, when not the host dialed. */
  serverName?: string;
  timeoutMs: number;
}

/** TLS contexts by the credentials they hold; a worker has one set (a new one after a renewal). */
const contexts = new Map<string, SecureContext>();
/** The last TLS session of each server, by credentials and address: a reconnect resumes it. */
const sessions = new Map<string, Buffer>();
const MAX_CONTEXTS = 16;
const MAX_SESSIONS = 64;

function credentialsId(d: LinkDial): string {
  return createHash('sha256')
    .update(d.ca ?? '-')
    .update('\0')
    .update(d.cert ?? '-')
    .update('\0')
    .update(d.key ?? '-')
    .digest('hex');
}

/**
 * The TLS context for these credentials, made once: a context per connection parses the CA, the
 * certificate and the key again on every reconnect, and holds native memory until the garbage
 * collector gets to it.
 */
function secureContextFor(id: string, d: LinkDial): SecureContext {
  let ctx = contexts.get(id);
  if (!ctx) {
    ctx = createSecureContext({ ca: d.ca, cert: d.cert, key: d.key });
    contexts.set(id, ctx);
    if (contexts.size > MAX_CONTEXTS) contexts.delete(contexts.keys().next().value!);
  }
  return ctx;
}

/**
 * Remembers the session tickets a server sends, so that the next connection to it resumes: the
 * client certificate is not sent again, which spares the server the certificate's parsing and
 * verification, and the memory Node 24's TLS server keeps of every client certificate it receives
 * (about 6 KiB, never freed). Sessions are kept per credentials, so new credentials always make a
 * full handshake; the server refuses a ticket it cannot use (restarted, expired) with a full one.
 */
function rememberSessions(socket: TLSSocket, key: string): void {
  socket.on('session', (session: Buffer) => {
    sessions.delete(key);
    sessions.set(key, session);
    if (sessions.size > MAX_SESSIONS) sessions.delete(sessions.keys().next().value!);
  });
}

/**
 * Connects offering kctl-tunnel/1 before h2 and sends HELLO with `md`. Null when the server chose
 * h2 (an upstream server, or a kctl server with extensions off): the caller speaks gRPC instead.
 */
export async function openLink(d: LinkDial, md: grpc.Metadata): Promise<LinkServerCall | null> {
  // A node whose way out is an HTTP proxy (HTTPS_PROXY): TLS runs inside a CONNECT.
  const proxy = proxyFor(d.host);
  const tunnel = proxy ? await connectThrough(proxy, d.host, d.port, d.timeoutMs) : undefined;
  return new Promise((resolve, reject) => {
    const name = d.serverName ?? (isIP(d.host) ? undefined : d.host);
    const id = credentialsId(d);
    const sessionKey = `${id} ${joinHostPort(d.host, d.port)} ${d.serverName ?? ''}`;
    const socket = tlsConnect({
      ...(tunnel ? { socket: tunnel } : { host: d.host, port: d.port }),
      secureContext: secureContextFor(id, d),
      session: sessions.get(sessionKey),
      servername: name,
      ALPNProtocols: [LINK_ALPN, 'h2'],
      // grpc-js's ssl_target_name_override: the certificate is checked against that name instead.
      ...(d.serverName
        ? { checkServerIdentity: (_host: string, cert: PeerCertificate) => checkServerIdentity(d.serverName!, cert) }
        : {}),
    });
    rememberSessions(socket, sessionKey);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no TLS connection to ${d.host}:${d.port} within ${d.timeoutMs / 1000} s`));
    }, d.timeoutMs);
    socket.once('error', (err) => {
      clearTimeout(timer);
      if (!socket.connecting) sessions.delete(sessionKey); // a failed handshake starts from nothing next time
      reject(err);
    });
    socket.once('secureConnect', () => {
      clearTimeout(timer);
      socket.removeAllListeners('error');
      if (socket.alpnProtocol !== LINK_ALPN) {
        socket.destroy();
        return resolve(null);
      }
      const link = new Link(socket);
      link.writeFrame(FRAME.HELLO, metadataJson(md));
      resolve(new LinkServerCall(link));
    });
  });
}
