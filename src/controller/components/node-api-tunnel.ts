// The node API tunnel behind the front door (node-api.<name>.<baseDomain>): how a node's API
// connections reach kube-apiserver through the door when their client sends no server name
// (kubelet after its TLS bootstrap, whose kubeconfig kubelet rewrites without one; pods later).
// The node's API balancer wraps such a connection in TLS with the node's own client certificate;
// this end checks it is a node of this cluster (cluster CA, group system:nodes), then passes the
// bytes inside, which are the client's own TLS with kube-apiserver, to kube-apiserver untouched.
// kube-apiserver authenticates the client itself; the tunnel only decides who may use it.
import { readFile, stat } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { createSecureContext, TLSSocket, type SecureContext } from 'node:tls';
import { messageOf } from '../../base/errors.ts';
import type { Logger } from '../../base/log.ts';
import type { PkiPaths } from '../../pki/index.ts';

/** The files are looked at again at most this often (a renewed certificate is used from then on). */
const CONTEXT_TTL_MS = 10_000;
/** The TLS handshake must be done within this. */
const HANDSHAKE_TIMEOUT_MS = 10_000;

export class NodeApiTunnel {
  private context: { ctx: SecureContext; key: string; at: number } | undefined;
  private readonly open = new Set<Socket>();
  private lastRefusalLog = 0;

  constructor(
    private readonly pki: PkiPaths,
    private readonly api: { host: string; port: number },
    private readonly log: Logger,
  ) {}

  /** A connection the door handed on from `client`. */
  accept(socket: Socket, client: string): void {
    this.open.add(socket);
    socket.once('close', () => this.open.delete(socket));
    socket.on('error', () => socket.destroy());
    void this.secureContext().then(
      (secureContext) => this.serve(socket, client, secureContext),
      (err: unknown) => {
        this.log.error({ err: messageOf(err) }, 'node API tunnel cannot read its certificate');
        socket.destroy();
      },
    );
  }

  close(): void {
    for (const s of this.open) s.destroy();
  }

  private serve(socket: Socket, client: string, secureContext: SecureContext): void {
    const tls = new TLSSocket(socket, { isServer: true, secureContext, requestCert: true, rejectUnauthorized: true });
    const timer = setTimeout(() => tls.destroy(), HANDSHAKE_TIMEOUT_MS);
    tls.on('error', (err) => {
      clearTimeout(timer);
      this.refuse(client, messageOf(err));
      socket.destroy();
    });
    tls.once('secure', () => {
      clearTimeout(timer);
      const subject = tls.getPeerCertificate().subject as Record<string, string | string[]> | undefined;
      const groups = [subject?.O ?? []].flat();
      const cn = String(subject?.CN ?? '');
      if (!groups.includes('system:nodes') || !cn.startsWith('system:node:')) {
        this.refuse(client, `a client certificate of ${cn || 'nobody'}, not of a node`);
        tls.destroy();
        return;
      }
      const upstream = connect({ host: this.api.host, port: this.api.port, noDelay: true });
      upstream.on('error', () => tls.destroy());
      tls.on('close', () => upstream.destroy());
      upstream.on('close', () => tls.destroy());
      tls.pipe(upstream);
      upstream.pipe(tls);
    });
  }

  /** The API serving certificate and the cluster CA (for the nodes' certificates), read again when they change. */
  private async secureContext(): Promise<SecureContext> {
    const now = Date.now();
    if (this.context && now - this.context.at < CONTEXT_TTL_MS) return this.context.ctx;
    const files = [this.pki.serverCert, this.pki.serverKey, this.pki.caCert];
    const key = (await Promise.all(files.map((f) => stat(f)))).map((s) => s.mtimeMs).join(',');
    if (this.context?.key !== key) {
      const [cert, privateKey, ca] = await Promise.all(files.map((f) => readFile(f)));
      this.context = { ctx: createSecureContext({ cert, key: privateKey, ca }), key, at: now };
    }
    this.context.at = now;
    return this.context.ctx;
  }

  private refuse(client: string, why: string): void {
    const now = Date.now();
    if (now - this.lastRefusalLog < 60_000) return;
    this.lastRefusalLog = now;
    this.log.warn({ client }, `node API tunnel refused a connection: ${why} (logged once a minute)`);
  }
}
