// The controller join endpoint (k0s serves one on :9443): a new control host with a controller
// token fetches what every controller must share (the cluster, front-proxy, etcd and add-ons CAs
// with their keys, and the service-account key pair) and, with etcd storage, is added to etcd as
// a learner, which this controller promotes once it has caught up; with kine, it must name the
// same database (credentials may differ), and a cluster on SQLite takes no second controller. HTTPS with this controller's
// API serving certificate, on spec.api.address only: the joiner trusts only the CA pinned in its
// token. The token is checked against its hashed Secret (controller-tokens.ts) and a join takes
// one of its uses before any key leaves; a join that fails after that gives the use back. A
// source address with too many bad tokens is refused for a while (join-limiter.ts). Keys travel
// only in this answer; nothing here logs them or the token's secret.
import { readFile } from 'node:fs/promises';
import { SHARED_PKI_FILES } from '../../pki/paths.ts';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { join } from 'node:path';
import type { Component, ComponentContext } from '../../base/component.ts';
import { joinHostPort } from '../../base/addresses.ts';
import type { Logger } from '../../base/log.ts';
import { addLearner, initialCluster, listMembers, promoteMember, type EtcdClientTls } from '../../etcd/members.ts';
import type { KubeClient } from '../../kube/client.ts';
import type { PkiPaths } from '../../pki/index.ts';
import type { ClusterConfig } from '../config/config.ts';
import { doorOnly } from '../config/urls.ts';
import { configMismatch, JOIN_PATH, type JoinRequest, type JoinResponse } from './join-request.ts';
import { ControllerTokenStore, TokenRejected, type ControllerToken } from './controller-tokens.ts';
import { FailureLimiter, JOIN_LIMITS } from './join-limiter.ts';
import { messageOf } from '../../base/errors.ts';
import type { ExecutableFiles } from '../upgrades/executables.ts';

/** A door connection by its two local ends (the same local port may reach two of this host's ports at once). */
const doorKey = (s: Socket): string => `${s.localPort ?? 0}:${s.remotePort ?? 0}`;

const PROMOTE_FOR_MS = 10 * 60_000;
/** How long a join waits for etcd to call every member healthy (its health interval is 5 s). */
const UNHEALTHY_WAIT_MS = 20_000;
/** How often expired controller tokens are deleted (the tokencleaner does this for bootstrap tokens). */
const PRUNE_EVERY_MS = 10 * 60_000;

class Refusal extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export class JoinServerComponent implements Component {
  readonly name = 'join-server';
  private log!: Logger;
  private server: Server | undefined;
  /** Open connections, cut at stop. */
  private readonly sockets = new Set<Socket>();
  /** Connections the front door handed on: their clients, by doorKey. */
  private readonly doorClients = new Map<string, string>();
  /** One etcd membership change at a time. */
  private queue: Promise<unknown> = Promise.resolve();
  private readonly aborts = new Set<AbortController>();
  private readonly tokens: ControllerTokenStore;
  private readonly limiter = new FailureLimiter();
  private pruneTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly cfg: ClusterConfig,
    private readonly pki: PkiPaths,
    kube: KubeClient,
    private readonly etcd: EtcdClientTls | undefined,
    /** kctl executables for upgrades, served beside the join (executables.ts). */
    private readonly executables?: ExecutableFiles,
    /**
     * Listen on loopback only: a controller whose keys come from --shared-pki (a pod) takes no
     * controller joins, and its spec.api.address is its exposure's, not one of its own.
     */
    private readonly loopback = false,
  ) {
    this.tokens = new ControllerTokenStore(kube);
  }

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  /** After the renewer renewed server.crt: new handshakes get it, open connections stay. */
  async reloadTls(): Promise<void> {
    this.server?.setSecureContext(await this.tlsOptions());
  }

  /**
   * This controller's API serving certificate; a client certificate is asked for (the cluster CA's,
   * for executables) but not required: a joining controller has none, its token is its credential.
   */
  private async tlsOptions() {
    const [cert, key, ca] = await Promise.all([
      readFile(this.pki.serverCert),
      readFile(this.pki.serverKey),
      readFile(this.pki.caCert),
    ]);
    return { cert, key, ca, requestCert: true, rejectUnauthorized: false };
  }

  async start(): Promise<void> {
    const server = createServer(await this.tlsOptions(), (req, res) => {
      if (this.executables?.matches(req))
        void this.executables.handle(req, res, this.log).catch((err: Error) => res.destroy(err));
      else void this.handle(req, res);
    });
    const { joinPort } = this.cfg.spec.api;
    // Only the door open: joins arrive through it (handed over in this process), none at the port.
    const address = doorOnly(this.cfg) || this.loopback ? '127.0.0.1' : this.cfg.spec.api.address;
    await new Promise<void>((resolve, reject) => {
      const failed = (err: NodeJS.ErrnoException) =>
        reject(
          new Error(
            `the join endpoint cannot listen on ${joinHostPort(address, joinPort)} (${err.code ?? err.message}); spec.api.address must be an address of this host and spec.api.joinPort a free port`,
          ),
        );
      server.once('error', failed);
      server.listen(joinPort, address, () => {
        server.off('error', failed);
        resolve();
      });
    });
    server.on('connection', (socket: Socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
    });
    this.server = server;
    void this.pruneTokens();
    this.pruneTimer = setInterval(() => void this.pruneTokens(), PRUNE_EVERY_MS).unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.pruneTimer);
    for (const a of this.aborts) a.abort();
    const closed = new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    // Cut what is still open (an executable download, perhaps to a node that vanished mid-way and
    // whose bytes wait for a window that never opens): the client goes on at another controller.
    // (the server's own closeAllConnections misses a TLS connection whose request is still unfinished)
    for (const socket of this.sockets) socket.destroy();
    await closed;
  }

  /** A connection the host's front door handed on, from `client` (its address); its remote end is the door. */
  acceptFromDoor(socket: Socket, client: string): void {
    if (!this.server) return void socket.destroy();
    const key = doorKey(socket);
    this.doorClients.set(key, client);
    socket.once('close', () => this.doorClients.delete(key));
    this.server.emit('connection', socket);
  }

  /** Who a request comes from: the client the front door named, else the connection's remote address. */
  private sourceOf(socket: Socket): string {
    return this.doorClients.get(doorKey(socket)) ?? socket.remoteAddress ?? 'unknown';
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const reply = (status: number, body: object) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    const source = this.sourceOf(req.socket);
    const blockedMs = this.limiter.blockedFor(source);
    if (blockedMs > 0) {
      // Logged once, when the block started; a request now costs no API call.
      reply(429, {
        error: `too many failed join attempts from ${source}; try again in ${Math.ceil(blockedMs / 1000)} s`,
      });
      return;
    }
    let taken: ControllerToken | undefined;
    try {
      if (req.method !== 'POST' || req.url !== JOIN_PATH)
        throw new Refusal(404, `only POST ${JOIN_PATH} is served here`);
      const checked = await this.tokens.check((req.headers.authorization ?? '').replace(/^Bearer /, ''));
      const request = parseRequest(await readBody(req));
      const mismatch = configMismatch(this.cfg, request);
      if (mismatch) throw new Refusal(409, mismatch);
      const files: Record<string, string> = {};
      for (const f of SHARED_PKI_FILES) files[f] = (await readFile(join(this.pki.dir, f))).toString('base64');
      taken = await this.tokens.takeUse(checked);
      const response: JoinResponse = { files };
      if (this.etcd) response.etcd = await this.serialized(() => this.addToEtcd(request));
      this.log.info(
        { tokenId: taken.id, usesLeft: taken.uses - taken.used, name: request.name, peerUrl: request.peerUrl, source },
        `controller ${request.name} joined`,
      );
      reply(200, response);
    } catch (err) {
      if (taken && !res.headersSent) await this.giveBack(taken);
      const status = err instanceof Refusal || err instanceof TokenRejected ? err.status : 500;
      const message = messageOf(err);
      if (status >= 500) this.log.warn({ err: message, source }, 'a controller join failed');
      else this.log.info({ status, reason: message, source }, 'a controller join was refused');
      if (status === 401 && this.limiter.fail(source))
        this.log.warn(
          { source },
          `${JOIN_LIMITS.failures} join attempts with a bad token from ${source} within ${JOIN_LIMITS.windowMs / 1000} s: refusing that address for ${JOIN_LIMITS.blockMs / 1000} s`,
        );
      reply(status, { error: message });
    }
  }

  /** The join failed before its answer left: the use it took goes back to the token. */
  private async giveBack(t: ControllerToken): Promise<void> {
    try {
      await this.tokens.giveBackUse(t.id);
    } catch (err) {
      this.log.warn(
        { tokenId: t.id, err: messageOf(err) },
        `a failed join could not give its use back to join token ${t.id}`,
      );
    }
  }

  private async pruneTokens(): Promise<void> {
    try {
      const { expired, oldFormat } = await this.tokens.prune();
      if (expired.length) this.log.info({ tokenIds: expired }, 'deleted expired controller join tokens');
      if (oldFormat.length)
        this.log.info(
          { tokenIds: oldFormat },
          'deleted controller join tokens an older kctl stored with their secret in plain (this version refuses them)',
        );
    } catch (err) {
      this.log.debug({ err: messageOf(err) }, 'controller join tokens not pruned this time');
    }
  }

  private serialized<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async addToEtcd(req: JoinRequest): Promise<{ initialCluster: string; memberId: string }> {
    const etcd = this.etcd!;
    let members;
    try {
      members = await listMembers(etcd);
    } catch (err) {
      throw new Refusal(
        503,
        `etcd cannot change its membership now (${messageOf(err)}); is a quorum of controllers running?`,
      );
    }
    const same = members.find((m) => m.peerURLs.includes(req.peerUrl));
    if (same && (same.name !== '' || !same.isLearner))
      throw new Refusal(
        409,
        `${req.peerUrl} is already etcd member ${same.name || same.id}; on that host run kctl etcd leave and kctl reset before joining again`,
      );
    const taken = members.find((m) => m.name === req.name && !m.peerURLs.includes(req.peerUrl));
    if (taken)
      throw new Refusal(
        409,
        `etcd member name ${req.name} is taken by ${taken.peerURLs.join(', ')}; set spec.storage.etcd.memberName on the joining controller`,
      );
    let added;
    let all;
    if (same) {
      // An earlier join of this controller that never started: hand out the same learner again.
      added = same;
      all = members;
    } else {
      ({ added, members: all } = await this.addLearnerWhenHealthy(req.peerUrl));
    }
    this.promoteWhenCaughtUp(added.id, req.name);
    return { initialCluster: initialCluster(all, { id: added.id, name: req.name }), memberId: added.id };
  }

  /**
   * etcd adds a member only while every voting member has been connected for its health interval
   * (5 s; "unhealthy cluster" otherwise), so a join right after a controller restarted waits that
   * out; a member that stays away refuses the join with what to do.
   */
  private async addLearnerWhenHealthy(peerUrl: string): Promise<Awaited<ReturnType<typeof addLearner>>> {
    const end = Date.now() + UNHEALTHY_WAIT_MS;
    for (;;) {
      try {
        return await addLearner(this.etcd!, peerUrl);
      } catch (err) {
        const message = messageOf(err);
        if (!/unhealthy cluster/.test(message))
          throw new Refusal(503, `etcd refused to add ${peerUrl} (${message}); is a quorum of controllers running?`);
        if (Date.now() > end)
          throw new Refusal(
            503,
            `etcd refused to add ${peerUrl}: not every etcd member has been reachable for the last ${UNHEALTHY_WAIT_MS / 1000} s (${message}); start every controller, or remove one that is gone for good with kctl etcd leave --peer-address ADDRESS on a live controller, then join again`,
          );
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  }

  /** etcd promotes a learner only once it has caught up with the leader: retry with backoff. */
  private promoteWhenCaughtUp(id: string, name: string): void {
    const abort = new AbortController();
    this.aborts.add(abort);
    const end = Date.now() + PROMOTE_FOR_MS;
    const attempt = async (delayMs: number): Promise<void> => {
      await new Promise((r) => setTimeout(r, delayMs));
      if (abort.signal.aborted) return;
      try {
        await this.serialized(() => promoteMember(this.etcd!, id));
        this.log.info({ name, memberId: id }, `etcd member ${name} promoted from learner to voting member`);
        this.aborts.delete(abort);
      } catch (err) {
        const message = messageOf(err);
        if (/not a learner/i.test(message)) {
          this.aborts.delete(abort);
          return;
        }
        if (Date.now() > end) {
          this.log.warn(
            { name, memberId: id, err: message },
            `etcd learner ${name} was not promoted within 10 minutes; is it running?`,
          );
          this.aborts.delete(abort);
          return;
        }
        this.log.debug({ name, err: message }, 'etcd learner not promoted yet');
        await attempt(Math.min(delayMs * 2, 10_000));
      }
    };
    void attempt(1_000);
  }
}

async function readBody(req: IncomingMessage): Promise<string> {
  let body = '';
  for await (const chunk of req) {
    body += (chunk as Buffer).toString();
    if (body.length > 64 * 1024) throw new Refusal(413, 'the join request is too large');
  }
  return body;
}

function parseRequest(body: string): JoinRequest {
  let r: Partial<JoinRequest>;
  try {
    r = JSON.parse(body) as Partial<JoinRequest>;
  } catch {
    throw new Refusal(400, 'the join request is not JSON');
  }
  if (
    typeof r.name !== 'string' ||
    typeof r.peerUrl !== 'string' ||
    (r.storage !== 'etcd' && r.storage !== 'kine') ||
    (r.datastore !== undefined && typeof r.datastore !== 'string') ||
    typeof r.network !== 'object' ||
    r.network === null
  )
    throw new Refusal(400, 'the join request needs name, peerUrl, storage and network');
  return r as JoinRequest;
}
