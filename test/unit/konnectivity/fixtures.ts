// Shared set-up for konnectivity tests: a cluster PKI with node client certificates, a server
// and agents on loopback, and small TCP targets. Everything is torn down by t.after.
import { readFile } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { after } from 'node:test';
import { Writable } from 'node:stream';
import * as grpc from '@grpc/grpc-js';
import { createLogger, type Logger } from '../../../src/base/log.ts';
import { AgentServiceClient, type Packet } from '../../../src/konnectivity/wire/protocol.ts';
import { openLink, type CallError } from '../../../src/konnectivity/wire/link-calls.ts';
import { ensurePki, pkiPaths } from '../../../src/pki/index.ts';
import {
  generateKeyPem,
  issueCaCert,
  issueLeafCert,
  keyIdOf,
  parseCert,
  parseKey,
  type Signer,
} from '../../../src/pki/x509.ts';
import { KonnectivityAgent, type KonnectivityAgentOptions } from '../../../src/konnectivity/agent/agent.ts';
import { KonnectivityServer, type KonnectivityServerOptions } from '../../../src/konnectivity/server/server.ts';
import {
  canonicalIdentifier,
  judgePodRanges,
  ownedBy,
  type NodeDirectory,
  type NodeRecord,
  type ReservedSpace,
} from '../../../src/base/ownership.ts';
import { tempDir } from '../../helpers.ts';

type T = { after: (fn: () => Promise<void> | void) => void };

export interface TestPki {
  dir: string;
  ca: string;
  serverCert: string;
  serverKey: string;
  /** A client certificate signed by `signer` (default: the cluster CA). */
  clientCert(o: {
    commonName: string;
    organizations?: string[];
    signer?: Signer;
  }): Promise<{ cert: string; key: string }>;
  /** A node certificate as kubelet TLS bootstrap makes them. */
  nodeCert(node: string): Promise<{ cert: string; key: string }>;
  /** A CA that has nothing to do with the cluster. */
  foreignCa(): Promise<Signer>;
}

const silentSink = new Writable({
  write(_c, _e, cb) {
    cb();
  },
});

/** Silent, unless KCTL_TEST_LOG=1 (then debug lines on stderr). */
export function quietLogger(): Logger {
  if (process.env.KCTL_TEST_LOG === '1')
    return createLogger({ destination: process.stderr, pretty: false, debug: true });
  return createLogger({ destination: silentSink, pretty: false });
}

async function signerFrom(name: string, certPem: string, keyPem: string): Promise<Signer> {
  const cert = parseCert(certPem, name, '');
  return { name, cert, certPem, key: parseKey(keyPem, name, ''), keyId: keyIdOf(cert) };
}

let shared: Promise<TestPki> | undefined;

/** One PKI per test file (key generation is the slow part); removed when the file's tests end. */
export function makePki(): Promise<TestPki> {
  shared ??= createPki({ after: (fn) => after(fn) });
  return shared;
}

/** A PKI of its own whose server certificates also carry `sans` (e.g. front-door names), removed after the test. */
export function makePkiWithNames(t: T, sans: string[]): Promise<TestPki> {
  return createPki(t, sans);
}

async function createPki(t: T, sans: string[] = []): Promise<TestPki> {
  const dir = await tempDir(t, 'kctl-knp-pki-');
  const log = quietLogger();
  await ensurePki(
    {
      dir,
      apiAddress: '127.0.0.1',
      sans: [OWN_LOOPBACK, ...sans],
      apiPort: 6443,
      serviceCIDR: '10.96.0.0/12',
      clusterDomain: 'cluster.local',
      hostname: 'ctrl-1',
      localAddresses: ['127.0.0.1'],
    },
    log,
  );
  const p = pkiPaths(dir);
  const [ca, caKey, serverCert, serverKey] = (await Promise.all(
    [p.caCert, p.caKey, p.konnectivityCert, p.konnectivityKey].map((f) => readFile(f, 'utf8')),
  )) as [string, string, string, string];
  const cluster = await signerFrom('kubernetes-ca', ca, caKey);
  const clientCert: TestPki['clientCert'] = async (o) => {
    const keyPem = await generateKeyPem();
    const cert = issueLeafCert({
      subject: { commonName: o.commonName, organizations: o.organizations },
      usages: ['clientAuth'],
      sans: [],
      key: parseKey(keyPem, 'key', ''),
      signer: o.signer ?? cluster,
      now: new Date(),
      years: 1,
    });
    return { cert, key: keyPem };
  };
  return {
    dir,
    ca,
    serverCert,
    serverKey,
    clientCert,
    nodeCert: (node) => clientCert({ commonName: `system:node:${node}`, organizations: ['system:nodes'] }),
    foreignCa: async () => {
      const keyPem = await generateKeyPem();
      const certPem = issueCaCert({
        subject: { commonName: 'other-ca' },
        key: parseKey(keyPem, 'key', ''),
        now: new Date(),
        years: 1,
      });
      return signerFrom('other-ca', certPem, keyPem);
    },
  };
}

/**
 * A loopback address of this test process's own (127.x.y.z, x from 1): unit files run side by side, and a
 * client another file left reconnecting to a port the kernel has since handed to this file's server
 * (on 127.0.0.1) would reach it. A test that counts the connections its server sees binds here.
 */
export const OWN_LOOPBACK = `127.${1 + Math.floor(Math.random() * 254)}.${Math.floor(Math.random() * 256)}.${1 + Math.floor(Math.random() * 254)}`;

/** The options each test server was started with (its socket paths). */
const serverOptions = new WeakMap<KonnectivityServer, KonnectivityServerOptions>();

export async function startServer(
  t: T,
  pki: TestPki,
  over: Partial<KonnectivityServerOptions> = {},
): Promise<KonnectivityServer> {
  const dir = await tempDir(t, 'kctl-knp-run-');
  const options: KonnectivityServerOptions = {
    udsPath: join(dir, 'konnectivity-server.sock'),
    httpConnectUdsPath: join(dir, 'konnectivity-connect.sock'),
    agentBindAddress: '127.0.0.1',
    agentPort: 0,
    adminPort: 0,
    tls: { cert: pki.serverCert, key: pki.serverKey, ca: pki.ca },
    log: quietLogger(),
    ...over,
  };
  const server = new KonnectivityServer(options);
  serverOptions.set(server, options);
  await server.init();
  await server.start();
  t.after(() => server.stop());
  return server;
}

export function udsOf(server: KonnectivityServer): { grpc: string; connect: string } {
  const o = serverOptions.get(server);
  if (!o) throw new Error('udsOf: not a server made by startServer');
  return { grpc: o.udsPath ?? '', connect: o.httpConnectUdsPath ?? '' };
}

export async function startAgent(
  t: T,
  pki: TestPki,
  servers: KonnectivityServer[] | { host: string; port: number }[],
  over: Partial<KonnectivityAgentOptions> = {},
): Promise<KonnectivityAgent> {
  const node = over.agentId ?? 'node-1';
  const creds = over.cert
    ? { cert: over.cert, key: over.key }
    : over.serviceAccountTokenPath
      ? {}
      : await pki.nodeCert(node);
  const agent = new KonnectivityAgent({
    servers: servers.map((s) =>
      s instanceof KonnectivityServer
        ? { host: serverOptions.get(s)?.agentBindAddress ?? '127.0.0.1', port: s.agentPort() }
        : s,
    ),
    ca: pki.ca,
    ...creds,
    agentId: node,
    identifiers: { host: [node] },
    syncIntervalMs: 100,
    syncIntervalCapMs: 1_000,
    log: quietLogger(),
    ...over,
  });
  await agent.start();
  t.after(() => agent.stop({ drain: false }));
  return agent;
}

export async function listen(
  t: T,
  onConnection: (s: Socket) => void,
  host = '127.0.0.1',
): Promise<{ server: Server; port: number; address: string; sockets: Set<Socket> }> {
  const sockets = new Set<Socket>();
  const server = createServer((s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => {});
    onConnection(s);
  });
  await new Promise<void>((r) => server.listen(0, host, r));
  const port = (server.address() as { port: number }).port;
  t.after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((r) => server.close(() => r()));
  });
  return { server, port, address: `${host}:${port}`, sockets };
}

/** A TCP echo server. */
export function echoServer(t: T): ReturnType<typeof listen> {
  return listen(t, (s) => s.pipe(s));
}

/** Reads a stream to its end. */
export async function readAll(s: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of s) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/** Reads exactly n bytes from a stream (then stops consuming). */
export function readN(s: NodeJS.ReadableStream & { pause(): void; resume(): unknown }, n: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let got = 0;
    const onData = (c: Buffer): void => {
      chunks.push(c);
      got += c.length;
      if (got >= n) {
        cleanup();
        resolve(Buffer.concat(chunks).subarray(0, n));
      }
    };
    const onEnd = (): void => {
      cleanup();
      reject(new Error(`stream ended after ${got} of ${n} bytes`));
    };
    const onError = (e: Error): void => {
      cleanup();
      reject(e);
    };
    const cleanup = (): void => {
      s.pause();
      s.off('data', onData);
      s.off('end', onEnd);
      s.off('error', onError);
    };
    s.on('data', onData);
    s.once('end', onEnd);
    s.once('error', onError);
  });
}

/** A hand-driven agent stream: the test sends and receives raw packets. */
export interface RawAgent {
  headers: grpc.Metadata;
  send(p: Packet): void;
  /** Next packet from the server (optionally of one type, skipping others). */
  next(type?: Packet['type'], timeoutMs?: number): Promise<Packet>;
  /** Resolves with the stream's end (status details). */
  ended: Promise<string>;
  close(): void;
}

export interface RawAgentOptions {
  agentId?: string;
  identifiers?: string;
  creds?: { cert: string; key: string } | null;
  token?: string;
  extensions?: boolean;
  /** 'link': kctl-tunnel/1 instead of gRPC (the server's other agent transport). */
  transport?: 'grpc' | 'link';
}

/** Connects to the server's agent port; rejects with the status details when refused. */
export async function rawAgent(
  t: T,
  pki: TestPki,
  server: KonnectivityServer,
  o: RawAgentOptions = {},
): Promise<RawAgent> {
  const creds = o.creds === null ? null : (o.creds ?? (await pki.nodeCert(o.agentId ?? 'raw-1')));
  const channelCreds = grpc.credentials.createSsl(
    Buffer.from(pki.ca),
    creds ? Buffer.from(creds.key) : null,
    creds ? Buffer.from(creds.cert) : null,
  );
  const client = new AgentServiceClient(`127.0.0.1:${server.agentPort()}`, channelCreds, {
    'grpc.use_local_subchannel_pool': 1,
  });
  const md = new grpc.Metadata();
  if (o.agentId !== '') md.set('agentid', o.agentId ?? 'raw-1');
  md.set('agentidentifiers', o.identifiers ?? '');
  if (o.token) md.set('authorization', `Bearer ${o.token}`);
  if (o.extensions) md.set('kctl-extensions', 'flow-control/1');
  // The stream's end (status details), whichever transport; set before the call can end.
  let onEnded: (details: string) => void = () => {};
  const ended = new Promise<string>((resolve) => {
    onEnded = resolve;
  });
  let call: {
    on(event: 'data', listener: (p: Packet) => void): unknown;
    once(event: 'metadata', listener: (md: grpc.Metadata) => void): unknown;
    write(p: Packet): unknown;
    cancel(): void;
  };
  if (o.transport === 'link') {
    const link = await openLink(
      {
        host: '127.0.0.1',
        port: server.agentPort(),
        ca: Buffer.from(pki.ca),
        cert: creds ? Buffer.from(creds.cert) : undefined,
        key: creds ? Buffer.from(creds.key) : undefined,
        timeoutMs: 5_000,
      },
      md,
    );
    if (!link) throw new Error('the server did not choose kctl-tunnel/1');
    link.on('error', (err: CallError) => onEnded(err.details ?? err.message));
    link.on('end', () => onEnded(''));
    call = link;
  } else {
    const grpcCall = client.Connect(md);
    grpcCall.on('status', (st: grpc.StatusObject) => onEnded(st.details));
    grpcCall.on('error', () => {});
    call = grpcCall;
  }
  const close = (): void => {
    call.cancel();
    client.close();
  };
  t.after(close);
  const queue: Packet[] = [];
  const waiters: (() => void)[] = [];
  call.on('data', (p: Packet) => {
    queue.push(p);
    for (const w of waiters.splice(0)) w();
  });
  const headers = await Promise.race([
    new Promise<grpc.Metadata>((resolve) => call.once('metadata', resolve)),
    ended.then((details) => {
      throw new Error(details);
    }),
  ]);
  return {
    headers,
    send: (p) => void call.write(p),
    ended,
    close,
    async next(type, timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const i = queue.findIndex((p) => type === undefined || p.type === type);
        if (i >= 0) return queue.splice(i, 1)[0] as Packet;
        if (Date.now() > deadline) throw new Error(`no ${type ?? 'packet'} from the server within ${timeoutMs} ms`);
        await new Promise<void>((r) => {
          waiters.push(r);
          setTimeout(r, 50);
        });
      }
    },
  };
}

/** A NodeDirectory the test edits by hand (the controller's is a watch of Node objects). */
export class FakeNodes implements NodeDirectory {
  synced = true;
  private readonly nodes = new Map<string, NodeRecord>();
  private readonly listeners = new Set<() => void>();

  /** Nodes in the order they first reported their addresses: owners() lists the first reporter first. */
  constructor(
    records: NodeRecord[] = [],
    readonly reserved?: ReservedSpace,
  ) {
    for (const r of records) this.nodes.set(r.name, r);
  }

  /** Adds or replaces a Node (InternalIP addresses) and tells the listeners, as a watch event would. */
  set(name: string, ...ips: string[]): void {
    this.nodes.set(name, { name, addresses: ips.map((address) => ({ type: 'InternalIP', address })) });
    for (const l of this.listeners) l();
  }

  /** As the controller's directory does: pod ranges only as judgePodRanges leaves them. */
  get(name: string): NodeRecord | undefined {
    const n = this.nodes.get(name);
    return n && { ...n, podCIDRs: judgePodRanges(this.nodes.values(), this.reserved).ranges.get(name) ?? [] };
  }

  owners(nameOrIp: string): string[] {
    const v = canonicalIdentifier(nameOrIp);
    const names = [...this.nodes.values()].filter((n) => ownedBy(n).includes(v)).map((n) => n.name);
    return names.includes(v) ? [v, ...names.filter((n) => n !== v)] : names; // a Node's own name is its own
  }

  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}
