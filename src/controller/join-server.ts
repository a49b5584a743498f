// The controller join endpoint (k0s serves one on :9443): a new control host with a controller
// token fetches what every controller must share (the cluster, front-proxy, etcd and add-ons CAs
// with their keys, and the service-account key pair) and, with etcd storage, is added to etcd as
// a learner, which this controller promotes once it has caught up; with kine, it must name the
// same database (credentials may differ), and a cluster on SQLite takes no second controller. HTTPS with this controller's
// API serving certificate: the joiner trusts only the CA pinned in its token. The token is
// checked against its bootstrap-token Secret (role controller, not expired). Keys travel only in
// this answer; nothing here logs them.
import { timingSafeEqual } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import type { Component } from '../base/component.ts';
import { httpsUrl } from '../base/addresses.ts';
import type { Logger } from '../base/log.ts';
import { datastoreIdentity } from '../etcd/kine.ts';
import { addLearner, initialCluster, listMembers, promoteMember, type EtcdClientTls } from '../etcd/members.ts';
import { BOOTSTRAP_TOKEN_RE } from '../join/token.ts';
import { KubeApiError, type KubeClient } from '../kube/client.ts';
import type { PkiPaths } from '../pki/index.ts';
import type { ClusterConfig } from './config.ts';

export const JOIN_PATH = '/v1/controller/join';

/** Files under <data-dir>/pki that every controller of a cluster shares. */
export const SHARED_PKI_FILES = [
  'ca.crt',
  'ca.key',
  'front-proxy-ca.crt',
  'front-proxy-ca.key',
  'sa.key',
  'sa.pub',
  'etcd/ca.crt',
  'etcd/ca.key',
  'addons-ca.crt',
  'addons-ca.key',
  'kubelet-serving-ca.crt',
  'kubelet-serving-ca.key',
] as const;

/** What a joining controller says about itself. */
export interface JoinRequest {
  /** Its etcd member name. */
  name: string;
  /** Its etcd peer URL (etcd storage). */
  peerUrl: string;
  storage: 'etcd' | 'kine';
  /** With kine: the database its data source names, without credentials (etcd/kine.ts datastoreIdentity); absent for SQLite. */
  datastore?: string;
  network: { podCIDR: string; serviceCIDR: string; clusterDomain: string };
}

export interface JoinResponse {
  /** SHARED_PKI_FILES, base64. */
  files: Record<string, string>;
  etcd?: { initialCluster: string; memberId: string };
}

const PROMOTE_FOR_MS = 10 * 60_000;
/** How long a join waits for etcd to call every member healthy (its health interval is 5 s). */
const UNHEALTHY_WAIT_MS = 20_000;

class Refusal extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** The joiner's config against the cluster's: differences that would split the cluster. */
export function configMismatch(cfg: ClusterConfig, req: JoinRequest): string | null {
  if (req.storage !== cfg.spec.storage.type)
    return `the cluster stores its state in ${cfg.spec.storage.type}, the joining controller is configured for ${req.storage}; set spec.storage.type: ${cfg.spec.storage.type}`;
  if (cfg.spec.storage.type === 'kine') {
    const ours = datastoreIdentity(cfg.spec.storage.kine.dataSource);
    if (!ours)
      return "the cluster keeps its state in kine on a SQLite file in one controller's data dir, which no other controller can share; for more than one controller use etcd, or kine on PostgreSQL or MySQL";
    if (req.datastore !== ours)
      return `the cluster's datastore is ${ours} but the joining controller's is ${req.datastore ?? 'a local SQLite file'}; set spec.storage.kine.dataSource to ${ours} (with this controller's credentials)`;
  }
  const n = cfg.spec.network;
  for (const k of ['podCIDR', 'serviceCIDR', 'clusterDomain'] as const)
    if (req.network[k] !== n[k])
      return `spec.network.${k} is ${n[k]} in the cluster but ${req.network[k]} on the joining controller; use the cluster's value`;
  return null;
}

export class JoinServerComponent implements Component {
  readonly name = 'join-server';
  private server: Server | undefined;
  /** One etcd membership change at a time. */
  private queue: Promise<unknown> = Promise.resolve();
  private readonly aborts = new Set<AbortController>();

  constructor(
    private readonly cfg: ClusterConfig,
    private readonly pki: PkiPaths,
    private readonly kube: KubeClient,
    private readonly etcd: EtcdClientTls | undefined,
    private readonly log: Logger,
  ) {}

  async start(): Promise<void> {
    const [cert, key] = await Promise.all([readFile(this.pki.serverCert), readFile(this.pki.serverKey)]);
    const server = createServer({ cert, key }, (req, res) => void this.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.cfg.spec.api.joinPort, '0.0.0.0', () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.server = server;
  }

  async stop(): Promise<void> {
    for (const a of this.aborts) a.abort();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    this.server?.closeAllConnections();
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const reply = (status: number, body: object) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    try {
      if (req.method !== 'POST' || req.url !== JOIN_PATH) throw new Refusal(404, `only POST ${JOIN_PATH} is served here`);
      const tokenId = await this.checkToken(req.headers.authorization ?? '');
      const body = await readBody(req);
      const request = parseRequest(body);
      const mismatch = configMismatch(this.cfg, request);
      if (mismatch) throw new Refusal(409, mismatch);
      const files: Record<string, string> = {};
      for (const f of SHARED_PKI_FILES) files[f] = (await readFile(join(this.pki.dir, f))).toString('base64');
      const response: JoinResponse = { files };
      if (this.etcd) response.etcd = await this.serialized(() => this.addToEtcd(request));
      this.log.info({ tokenId, name: request.name, peerUrl: request.peerUrl }, `controller ${request.name} joined`);
      reply(200, response);
    } catch (err) {
      const status = err instanceof Refusal ? err.status : 500;
      const message = (err as Error).message;
      if (status >= 500) this.log.warn({ err: message }, 'a controller join failed');
      else this.log.info({ status, reason: message }, 'a controller join was refused');
      reply(status, { error: message });
    }
  }

  private serialized<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** Returns the token id of a valid controller token; refuses everything else. */
  private async checkToken(header: string): Promise<string> {
    const m = BOOTSTRAP_TOKEN_RE.exec(header.replace(/^Bearer /, ''));
    const rejected = new Refusal(
      401,
      'the join token was rejected (expired, invalidated or never issued); create a new one with: kctl token create --role controller',
    );
    if (!m) throw rejected;
    const id = m[1]!;
    const secret = m[2]!;
    let s: { metadata?: { labels?: Record<string, string> }; data?: Record<string, string> };
    try {
      s = await this.kube.get(`/api/v1/namespaces/kube-system/secrets/bootstrap-token-${id}`);
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 404) throw rejected;
      throw new Refusal(503, `cannot check the join token: ${(err as Error).message.split('\n')[0]}`);
    }
    const dec = (k: string) => Buffer.from(s.data?.[k] ?? '', 'base64');
    const want = dec('token-secret');
    const got = Buffer.from(secret);
    if (want.length !== got.length || !timingSafeEqual(want, got)) throw rejected;
    const expiration = dec('expiration').toString();
    if (expiration && Date.parse(expiration) <= Date.now()) throw rejected;
    if (s.metadata?.labels?.['kctl.dev/role'] !== 'controller')
      throw new Refusal(401, 'this is not a controller join token; create one with: kctl token create --role controller');
    return id;
  }

  private async addToEtcd(req: JoinRequest): Promise<{ initialCluster: string; memberId: string }> {
    const etcd = this.etcd!;
    let members;
    try {
      members = await listMembers(etcd);
    } catch (err) {
      throw new Refusal(503, `etcd cannot change its membership now (${(err as Error).message}); is a quorum of controllers running?`);
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
        const message = (err as Error).message;
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
        const message = (err as Error).message;
        if (/not a learner/i.test(message)) {
          this.aborts.delete(abort);
          return;
        }
        if (Date.now() > end) {
          this.log.warn({ name, memberId: id, err: message }, `etcd learner ${name} was not promoted within 10 minutes; is it running?`);
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

/** The URL joining controllers use to reach this controller's join endpoint. */
export function joinServerUrl(cfg: ClusterConfig): string {
  return httpsUrl(cfg.spec.api.address, cfg.spec.api.joinPort);
}
