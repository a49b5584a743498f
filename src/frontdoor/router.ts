// The front door: one TCP port that routes every TLS connection by the server name in its
// ClientHello to a cluster's kube-apiserver, konnectivity server or join endpoint, and splices the
// bytes through untouched. It holds no key and terminates nothing: each cluster's own server
// authenticates the client and proves itself with its own certificate (which carries the name).
//
// Every kctl process on the host that has a front door listens on the same port with
// SO_REUSEPORT, and every one can route every name (the routes come from the host's registry):
// the kernel spreads connections over the live ones, and a cluster that stops takes nobody's
// traffic with it. A name no cluster has is closed, never sent to a default.
import { connect, createServer, type Server, type Socket } from 'node:net';
import { joinHostPort } from '../base/addresses.ts';
import { messageOf } from '../base/errors.ts';
import type { Logger } from '../base/log.ts';
import { canSplice, holdReading, resumeReading, spliceSockets, type Relay } from '../base/splice.ts';
import { ClientHelloReader } from './client-hello.ts';
import { proxyHeader } from './proxy-header.ts';

/** Where a name leads. */
export interface FrontDoorRoute {
  cluster: string;
  /** api, konnectivity or join. */
  endpoint: string;
  host: string;
  port: number;
  /**
   * Set for kctl's own listeners (konnectivity, join): the connection starts with a PROXY v2
   * header naming the client, carrying this key (hex), so those listeners count per client address.
   */
  key?: string;
}

/** Who has which name now (the host's registry; tests pass a map). */
export interface RouteTable {
  route(serverName: string): Promise<FrontDoorRoute | undefined>;
}

export interface FrontDoorOptions {
  port: number;
  /** Default every address. */
  address?: string;
  /** A connection must send its whole ClientHello within this. */
  helloTimeoutMs?: number;
  /** Connections that have not sent their ClientHello yet, at most; at the cap a new one closes the oldest. */
  maxPending?: number;
  /** The backend must accept within this. */
  connectTimeoutMs?: number;
  /** Refused names are logged at most once per this (with how many were refused since). */
  refusalLogEveryMs?: number;
}

export const FRONT_DOOR_DEFAULTS = {
  port: 443,
  helloTimeoutMs: 10_000,
  maxPending: 1024,
  connectTimeoutMs: 5_000,
  refusalLogEveryMs: 60_000,
} satisfies Partial<FrontDoorOptions>;

/** How many refused names `stats()` keeps by name (the rest are counted in `total` only). */
const REFUSED_NAMES_KEPT = 32;

export interface FrontDoorStats {
  port: number;
  /** Per cluster: connections open now and since start (this process's share of the port). */
  clusters: Record<string, { open: number; total: number }>;
  refused: {
    total: number;
    /** Connections that were not TLS, sent a bad or no ClientHello in time, or named nobody. */
    notTls: number;
    noName: number;
    /** Names no cluster has, with how often each was asked for. */
    names: Record<string, number>;
  };
}

export class FrontDoor {
  private readonly o: Required<Omit<FrontDoorOptions, 'address'>> & Pick<FrontDoorOptions, 'address'>;
  private server: Server | undefined;
  private readonly pending = new Set<Socket>();
  /** Connections piped in JavaScript (no native addon), and those the kernel relays. */
  private readonly spliced = new Set<Socket>();
  private readonly relays = new Set<Relay>();
  private readonly counts = new Map<string, { open: number; total: number }>();
  private readonly refused = { total: 0, notTls: 0, noName: 0, names: new Map<string, number>() };
  private lastRefusalLog = 0;
  private refusedSinceLog = 0;

  constructor(
    o: FrontDoorOptions,
    private readonly routes: RouteTable,
    private readonly log: Logger,
  ) {
    this.o = { ...FRONT_DOOR_DEFAULTS, ...o };
  }

  /** Listens (beside every other kctl on this host that does). */
  async listen(): Promise<void> {
    // A larger buffer per accepted socket where the door pipes in JavaScript (no native addon):
    // fewer pause/resume turns per MiB (about a quarter less of the door's CPU than the 16 KiB default).
    const server = createServer({ allowHalfOpen: true, noDelay: true, highWaterMark: 1024 * 1024 }, (s) =>
      this.accept(s),
    );
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ port: this.o.port, host: this.o.address, reusePort: true }, () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', (err) => this.log.error({ err: messageOf(err) }, 'front door listener failed'));
    this.server = server;
  }

  /** The port it listens on (the one asked for, or the one picked for port 0). */
  get port(): number {
    const a = this.server?.address();
    return typeof a === 'object' && a ? a.port : this.o.port;
  }

  /** Stops taking connections; spliced ones are cut (their clients reconnect to another process or host). */
  async close(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    const closed = server ? new Promise<void>((r) => server.close(() => r())) : Promise.resolve();
    // server.close() waits for every connection: end them first.
    for (const s of [...this.pending, ...this.spliced]) s.destroy();
    for (const r of this.relays) r.stop();
    await closed;
  }

  stats(): FrontDoorStats {
    return {
      port: this.port,
      clusters: Object.fromEntries([...this.counts].map(([k, v]) => [k, { ...v }])),
      refused: {
        total: this.refused.total,
        notTls: this.refused.notTls,
        noName: this.refused.noName,
        names: Object.fromEntries(this.refused.names),
      },
    };
  }

  private accept(client: Socket): void {
    // At the cap the oldest pending connection gives way: a flood of silent connections costs a
    // bounded amount and never starves a client that sends its ClientHello.
    if (this.pending.size >= this.o.maxPending) this.pending.values().next().value?.destroy();
    this.pending.add(client);
    const chunks: Buffer[] = [];
    let size = 0;
    const timer = setTimeout(() => refuse('notTls', 'no ClientHello in time'), this.o.helloTimeoutMs);
    const done = (): void => {
      clearTimeout(timer);
      this.pending.delete(client);
      client.off('data', onData);
      client.off('end', onEnd);
    };
    const refuse = (kind: 'notTls' | 'noName', why: string): void => {
      done();
      this.refuse(kind, undefined, why);
      client.destroy();
    };
    const onEnd = (): void => refuse('notTls', 'closed before its ClientHello');
    const reader = new ClientHelloReader();
    const onData = (chunk: Buffer): void => {
      chunks.push(chunk);
      size += chunk.length; // bounded: the reader says `bad` past MAX_HELLO_BYTES
      const hello = reader.push(chunk);
      if (hello.kind === 'more') return;
      // What arrived, whole and joined once: written to the backend first.
      const head = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
      if (hello.kind === 'bad') return refuse('notTls', hello.reason);
      if (!hello.serverName) return refuse('noName', 'a ClientHello without a server name');
      done();
      client.pause();
      const name = hello.serverName;
      this.routes.route(name).then(
        (route) => (route ? this.splice(client, head, route) : this.refuseName(client, name)),
        (err: unknown) => {
          this.log.error({ err: messageOf(err), name }, 'front door could not read its routes');
          client.destroy();
        },
      );
    };
    client.on('data', onData);
    client.once('end', onEnd);
    client.on('error', () => client.destroy());
    client.on('close', () => {
      clearTimeout(timer);
      this.pending.delete(client);
    });
  }

  private refuseName(client: Socket, name: string): void {
    this.refuse('name', name, 'no cluster has this name');
    client.destroy();
  }

  private refuse(kind: 'notTls' | 'noName' | 'name', name: string | undefined, why: string): void {
    this.refused.total++;
    if (kind === 'notTls') this.refused.notTls++;
    else if (kind === 'noName') this.refused.noName++;
    else if (name !== undefined) {
      const n = this.refused.names.get(name);
      if (n !== undefined || this.refused.names.size < REFUSED_NAMES_KEPT) this.refused.names.set(name, (n ?? 0) + 1);
    }
    this.refusedSinceLog++;
    const now = Date.now();
    if (now - this.lastRefusalLog < this.o.refusalLogEveryMs) return;
    this.log.warn(
      { name, refused: this.refusedSinceLog, refusedTotal: this.refused.total },
      `front door closed a connection: ${why} (logged once per ${this.o.refusalLogEveryMs / 1000} s; kctl status counts them)`,
    );
    this.lastRefusalLog = now;
    this.refusedSinceLog = 0;
  }

  /**
   * Counts a connection the kernel relays until its relay ends. Outside splice(): a callback made
   * in there would keep its whole scope (both Node sockets, the ClientHello) for the connection's life.
   */
  private relayed(relay: Relay, count: { open: number }): void {
    this.relays.add(relay);
    void relay.done.then(() => {
      this.relays.delete(relay);
      count.open--;
    });
  }

  private splice(client: Socket, head: Buffer, route: FrontDoorRoute): void {
    if (client.destroyed) return;
    const count = this.counts.get(route.cluster) ?? { open: 0, total: 0 };
    this.counts.set(route.cluster, count);
    count.open++;
    count.total++;
    this.spliced.add(client);
    const backend = connect({ host: route.host, port: route.port, noDelay: true, allowHalfOpen: true });
    const timer = setTimeout(() => backend.destroy(new Error('no connection in time')), this.o.connectTimeoutMs);
    let connected = false;
    let closed = false;
    const close = (): void => {
      if (closed) return;
      closed = true;
      clearTimeout(timer);
      count.open--;
      this.spliced.delete(client);
      client.destroy();
      backend.destroy();
    };
    // pipe() honours backpressure both ways and passes each side's end on (half-close).
    const pipe = (): void => {
      client.pipe(backend);
      backend.pipe(client);
      client.resume();
    };
    backend.once('connect', () => {
      connected = true;
      clearTimeout(timer);
      if (route.key !== undefined) backend.write(clientHeader(client, route.key));
      if (!canSplice(client, backend)) {
        backend.write(head);
        return pipe();
      }
      // The kernel relays from here (base/splice.ts): what Node has read of either side goes
      // first, and has left libuv before, or the kernel's copy would overtake it.
      const toBackend = [head, ...holdReading(client)];
      const toClient = holdReading(backend);
      let writing = toClient.length > 0 ? 2 : 1;
      let started = false;
      const start = (): void => {
        started = true;
        const relay = spliceSockets(client, backend);
        if (relay) {
          // Node's sockets are gone (their close events find it closed): the relay holds the connection.
          closed = true;
          this.spliced.delete(client);
          return this.relayed(relay, count);
        }
        for (const s of [client, backend]) resumeReading(s);
        pipe();
      };
      const flushed = (err?: Error | null): void => {
        if (started) return;
        if (err || closed) return close();
        if (--writing === 0) start();
      };
      backend.write(toBackend.length === 1 ? head : Buffer.concat(toBackend), flushed);
      if (toClient.length > 0) client.write(Buffer.concat(toClient), flushed);
      // Usually the kernel took it all at once: no turn of the loop to wait for the callbacks.
      if (!closed && backend.writableLength === 0 && client.writableLength === 0) start();
    });
    backend.on('error', (err) => {
      if (connected) return close();
      this.log.warn(
        {
          cluster: route.cluster,
          endpoint: route.endpoint,
          backend: joinHostPort(route.host, route.port),
          err: messageOf(err),
        },
        'front door could not reach the cluster',
      );
      close();
    });
    client.on('error', close);
    client.on('close', close);
    backend.on('close', close);
  }
}

/** The PROXY v2 header for a client's connection to the door. */
function clientHeader(client: Socket, key: string): Buffer {
  return proxyHeader(
    { address: client.remoteAddress ?? '', port: client.remotePort ?? 0 },
    { address: client.localAddress ?? '', port: client.localPort ?? 0 },
    Buffer.from(key, 'hex'),
  );
}
