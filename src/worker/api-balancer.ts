// The node-local API balancer (k0s calls its own "node-local load balancing"): kubelet,
// kube-proxy and kctl's own client on a worker reach kube-apiserver through 127.0.0.1:7443, a
// TCP proxy over every live controller's API server. The upstreams start as the join token's
// and then follow the controllers' leases; each is health-checked (GET /readyz, cluster CA)
// every 2 s. A new connection goes to a healthy upstream (round robin); when an upstream turns
// unhealthy its open connections are cut, so kubelet's watches reconnect through a live
// controller at once instead of waiting for a dead TCP connection to time out. Losing one
// controller is then invisible to the node. TLS passes through untouched: kube-apiserver's
// serving certificate names 127.0.0.1 on every controller.
//
// Over a bad link a single slow check says little: one lost SYN costs a second, a lost segment
// on a 600 ms path more. So a definite answer (HTTP status other than 200, connection refused)
// turns an upstream unhealthy at once, but silence (a check that times out) only after three in a
// row, checked again 0.5 s after each failure: a controller that vanishes without a word is cut
// within about 14 s (2 + 3 x 3.5 s + 2 x 0.5 s), and 1-2 % loss does not cut every watch now and
// then (a check on a 600 ms path takes about 1.8 s, one lost segment about a second more).
import { readFileSync } from 'node:fs';
import { once } from 'node:events';
import { createServer, type Server, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { dial } from '../base/proxy.ts';
import { joinHostPort, splitHostPort, urlHost, type FrontDoorEndpoint } from '../base/addresses.ts';
import { ClientHelloReader } from '../frontdoor/client-hello.ts';
import type { Component, ComponentContext, ComponentStatus } from '../base/component.ts';
import type { Logger } from '../base/log.ts';
import type { LiveController } from '../kube/controller-leases.ts';
import type { ControllerFollower } from './controller-watch.ts';
import { httpsGet } from '../base/probe.ts';
import { messageOf } from '../base/errors.ts';

export const API_BALANCER_PORT = 7443;
export const API_BALANCER_URL = `https://127.0.0.1:${API_BALANCER_PORT}`;

/** Timings (options for tests; the defaults are what a worker runs with). */
export interface ApiBalancerTimings {
  /** How often each upstream's /readyz is checked. */
  checkEveryMs: number;
  /** The whole check (TCP, TLS, request, answer) must finish within this. */
  checkTimeoutMs: number;
  /** Checks that time out in a row before an upstream counts as unhealthy. */
  silentChecksToCut: number;
  /** After a failed check, the next comes this soon. */
  recheckAfterFailureMs: number;
  /** A new connection to an upstream gives up after this (then the next upstream is tried). */
  connectTimeoutMs: number;
}

const DEFAULT_TIMINGS: ApiBalancerTimings = {
  checkEveryMs: 2_000,
  checkTimeoutMs: 3_500,
  silentChecksToCut: 3,
  recheckAfterFailureMs: 500,
  connectTimeoutMs: 5_000,
};

export interface UpstreamStatus {
  /** host:port of a kube-apiserver. */
  address: string;
  healthy: boolean;
  connections: number;
  lastError?: string;
}

export interface ApiBalancerStatus {
  listen: string;
  /** The node-local address pods reach the API at behind a front door (the kubernetes Service's endpoint). */
  podsListen?: string;
  upstreams: UpstreamStatus[];
}

/** A controller's API server as the balancer is told of it: its URL, and its host's front door if it has one. */
export interface ApiServerEntry {
  url: string;
  door?: FrontDoorEndpoint;
}

interface Upstream {
  url: string;
  host: string;
  port: number;
  /** Through this front door: clients that name the cluster's API pass through; others go in the node API tunnel. */
  door?: FrontDoorEndpoint;
  healthy: boolean;
  lastError?: string;
  sockets: Set<Socket>;
  /** Checks in a row that timed out (reset by any answer). */
  silentChecks: number;
  /** The check in flight: a second caller waits for it instead of starting another. */
  checking?: Promise<void>;
  recheck?: NodeJS.Timeout;
}

/** An https API server URL (or its front door) as an upstream; null when it is not one. */
function upstreamOf(e: ApiServerEntry): Upstream | null {
  const door = e.door ? splitHostPort(e.door.address) : null;
  let u: URL;
  try {
    u = new URL(door ? `https://${e.door!.address}` : e.url);
  } catch {
    return null;
  }
  if (u.protocol !== 'https:') return null;
  return {
    url: u.origin,
    host: door?.host ?? urlHost(e.url),
    port: door?.port ?? Number(u.port || 443),
    ...(door ? { door: e.door } : {}),
    healthy: false,
    sockets: new Set(),
    silentChecks: 0,
  };
}

export class ApiBalancerComponent implements Component, ControllerFollower {
  readonly name = 'api-balancer';
  private server: Server | undefined;
  private pods: { server: Server; address: string } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private upstreams: Upstream[] = [];
  private next = 0;
  private stopped = false;

  private log!: Logger;
  private readonly t: ApiBalancerTimings;

  constructor(
    private readonly o: {
      caFile: string;
      apiServers: ApiServerEntry[];
      /** The node's client certificate and key (one PEM): the node API tunnel behind a front door is opened with it. */
      nodeCertFile?: string;
      port?: number;
      timings?: Partial<ApiBalancerTimings>;
      /** An upstream's host answers again (e.g. after a partition): the agent can retry it now. */
      onHealthy?: (host: string) => void;
    },
  ) {
    this.t = { ...DEFAULT_TIMINGS, ...o.timings };
  }

  /** The join token's API servers to start with, logged as joining. */
  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
    this.setUpstreams(this.o.apiServers);
  }

  /** Every live controller's API server is an upstream (through its host's front door when it has one). */
  controllersChanged(live: LiveController[]): void {
    this.setUpstreams(live.map((c) => ({ url: c.apiServer, ...(c.frontDoor ? { door: c.frontDoor } : {}) })));
  }

  /** The API servers now (from the controllers' leases); an empty list keeps the current ones. */
  setUpstreams(entries: ApiServerEntry[]): void {
    const wanted = entries.map(upstreamOf).filter((u): u is Upstream => u !== null);
    if (wanted.length === 0) return;
    const keep = this.upstreams.filter((u) => wanted.some((w) => w.url === u.url));
    for (const gone of this.upstreams.filter((u) => !keep.includes(u))) {
      this.log.info({ upstream: gone.url }, 'API server left the cluster; closing its connections');
      clearTimeout(gone.recheck);
      for (const s of gone.sockets) s.destroy();
    }
    const added = wanted.filter((w) => !keep.some((u) => u.url === w.url));
    if (added.length) this.log.info({ added: added.map((u) => u.url) }, 'API servers joined the cluster');
    this.upstreams = [...keep, ...added];
    void this.checkAll();
  }

  async start(): Promise<void> {
    await this.checkAll();
    this.server = await this.listen('127.0.0.1', this.o.port ?? API_BALANCER_PORT);
    this.timer = setInterval(() => void this.checkAll(), this.t.checkEveryMs);
  }

  /** Listens at `address` (host:port) too, for pods, instead of where it did; nowhere for them when undefined. */
  async servePods(address: string | undefined): Promise<void> {
    if (address === this.pods?.address) return;
    await closeServer(this.pods?.server);
    this.pods = undefined;
    const at = address ? splitHostPort(address) : null;
    if (at && !this.stopped) this.pods = { server: await this.listen(at.host, at.port), address: address! };
  }

  private async listen(host: string, port: number): Promise<Server> {
    const server = createServer((client) => this.accept(client));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    return server;
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.stopped = true;
    await closeServer(this.pods?.server);
    for (const u of this.upstreams) {
      clearTimeout(u.recheck);
      for (const s of u.sockets) s.destroy();
    }
    await closeServer(this.server);
  }

  status(): Partial<ComponentStatus> {
    const healthy = this.upstreams.filter((u) => u.healthy).length;
    return {
      lastError:
        healthy === 0
          ? `no healthy API server (${this.upstreams.map((u) => u.lastError ?? u.url).join('; ')})`
          : undefined,
    };
  }

  /** The port it listens on (the configured one, or the one the OS chose for port 0). */
  listenPort(): number {
    const a = this.server?.address();
    return typeof a === 'object' && a ? a.port : (this.o.port ?? API_BALANCER_PORT);
  }

  snapshot(): ApiBalancerStatus {
    return {
      listen: `127.0.0.1:${this.listenPort()}`,
      ...(this.pods ? { podsListen: this.pods.address } : {}),
      upstreams: this.upstreams.map((u) => ({
        address: joinHostPort(u.host, u.port),
        healthy: u.healthy,
        connections: u.sockets.size,
        ...(u.lastError ? { lastError: u.lastError } : {}),
      })),
    };
  }

  private async checkAll(): Promise<void> {
    await Promise.all(this.upstreams.map((u) => this.check(u)));
  }

  private check(u: Upstream): Promise<void> {
    if (this.stopped) return Promise.resolve();
    u.checking ??= this.checkOnce(u).finally(() => (u.checking = undefined));
    return u.checking;
  }

  private async checkOnce(u: Upstream): Promise<void> {
    clearTimeout(u.recheck);
    let verdict: 'healthy' | 'refused' | 'silent';
    try {
      const r = await withDeadline(
        httpsGet(
          { url: `${u.url}/readyz`, ca: this.o.caFile, ...(u.door ? { serverName: u.door.api } : {}) },
          this.t.checkTimeoutMs,
        ),
        this.t.checkTimeoutMs,
      );
      verdict = r.status === 200 ? 'healthy' : 'refused';
      u.lastError = r.status === 200 ? undefined : `${u.url}/readyz: HTTP ${r.status}`;
    } catch (err) {
      u.lastError = `${u.url}: ${messageOf(err)}`;
      verdict = (err as { code?: string }).code === 'ECONNREFUSED' ? 'refused' : 'silent';
    }
    if (!this.upstreams.includes(u) || this.stopped) return;
    u.silentChecks = verdict === 'silent' ? u.silentChecks + 1 : 0;
    if (verdict !== 'healthy') u.recheck = setTimeout(() => void this.check(u), this.t.recheckAfterFailureMs);
    const healthy =
      verdict === 'healthy' || (verdict === 'silent' && u.healthy && u.silentChecks < this.t.silentChecksToCut);
    if (healthy === u.healthy) return;
    u.healthy = healthy;
    if (healthy) {
      this.log.info({ upstream: u.url }, 'API server healthy');
      this.o.onHealthy?.(u.host);
    } else {
      const why = verdict === 'silent' ? ` (${u.silentChecks} checks in a row without an answer)` : '';
      this.log.warn(
        { upstream: u.url, err: u.lastError },
        `API server unhealthy${why}; moving its connections to the others`,
      );
      for (const s of u.sockets) s.destroy();
    }
  }

  /** The next healthy upstream after the last one used; any upstream when none is known healthy. */
  private pick(exclude: Set<Upstream>): Upstream | undefined {
    const healthy = this.upstreams.filter((u) => u.healthy && !exclude.has(u));
    const pool = healthy.length > 0 ? healthy : this.upstreams.filter((u) => !exclude.has(u));
    if (pool.length === 0) return undefined;
    return pool[this.next++ % pool.length];
  }

  /**
   * A new client connection. With a front door among the upstreams its ClientHello is read first:
   * a client that names the cluster's API is passed through the door as it is, any other (kubelet
   * after its TLS bootstrap, whose kubeconfig kubelet rewrites without a server name) goes in the
   * node API tunnel. Without a door nothing is read: the bytes pass as they come.
   */
  private accept(client: Socket): void {
    if (!this.upstreams.some((u) => u.door)) return this.proxy(client, { head: Buffer.alloc(0) });
    const chunks: Buffer[] = [];
    const reader = new ClientHelloReader();
    const timer = setTimeout(() => client.destroy(), this.t.connectTimeoutMs * 2);
    const onData = (chunk: Buffer): void => {
      chunks.push(chunk);
      const hello = reader.push(chunk);
      if (hello.kind === 'more') return;
      const head = Buffer.concat(chunks);
      clearTimeout(timer);
      client.off('data', onData);
      client.pause();
      this.proxy(client, { head, serverName: hello.kind === 'hello' ? hello.serverName : undefined });
    };
    client.on('data', onData);
    client.on('error', () => client.destroy());
    client.once('close', () => clearTimeout(timer));
  }

  private proxy(client: Socket, first: { head: Buffer; serverName?: string }, tried = new Set<Upstream>()): void {
    const u = this.pick(tried);
    if (!u) {
      client.destroy();
      return;
    }
    tried.add(u);
    client.pause();
    // A silent upstream is given up for the next one; a client that goes away before the upstream
    // answers takes the attempt with it (no socket left to connect after a partition heals).
    this.open(u, first.serverName).then(
      (upstream) => {
        if (client.destroyed) return void upstream.destroy();
        u.sockets.add(upstream);
        upstream.on('error', () => client.destroy());
        client.on('error', () => upstream.destroy());
        upstream.on('close', () => {
          u.sockets.delete(upstream);
          client.destroy();
        });
        client.on('close', () => upstream.destroy());
        if (first.head.length > 0) upstream.write(first.head);
        client.pipe(upstream);
        upstream.pipe(client);
        client.resume();
      },
      (err: unknown) => {
        if ((err as { code?: string }).code === 'ECONNREFUSED') u.healthy = false;
        u.lastError = `${u.url}: ${messageOf(err)}`;
        if (!client.destroyed) this.proxy(client, first, tried); // try the next one
      },
    );
  }

  /**
   * A connection to upstream `u` (through the node's HTTP proxy when HTTPS_PROXY names one) for a
   * client that sent `serverName`: through a front door, the client's own TLS when it names the
   * cluster's API, else inside the node API tunnel (TLS with the node's certificate, which the
   * controller checks before it passes the bytes on).
   */
  private async open(u: Upstream, serverName: string | undefined): Promise<Socket> {
    const raw = await dial(u.host, u.port, this.t.connectTimeoutMs);
    if (!u.door || serverName?.toLowerCase() === u.door.api.toLowerCase()) return raw;
    let pem: Buffer;
    try {
      pem = readFileSync(this.o.nodeCertFile ?? '');
    } catch {
      raw.destroy();
      throw new Error('no node client certificate yet for the node API tunnel (kubelet bootstraps first)');
    }
    const tls = tlsConnect({
      socket: raw,
      servername: u.door.nodeApi,
      ca: readFileSync(this.o.caFile),
      cert: pem,
      key: pem,
    });
    const timer = setTimeout(() => tls.destroy(new Error('no TLS handshake in time')), this.t.connectTimeoutMs);
    try {
      await once(tls, 'secureConnect');
      return tls;
    } catch (err) {
      tls.destroy();
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }
}

const closeServer = (server: Server | undefined): Promise<void> =>
  new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));

/** Rejects after `ms` even when the promise's own timeout (socket idle) keeps waiting. */
function withDeadline<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms / 1000} s`)), ms);
  });
  return Promise.race([p, deadline]).finally(() => clearTimeout(timer));
}
