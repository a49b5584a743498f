// The paths from the driver to the target, and how to start each one's processes.
// direct: the driver dials the target itself. upstream: proxy-server + proxy-agent (ANP
// v0.36, from the component payload), one pair with the GRPC frontend and one with the
// HTTP-CONNECT frontend (an upstream server has one or the other). kctl: bench/kctl-server.ts +
// bench/kctl-agent.ts, each its own node process, so RSS is per side; one server has both.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { KCTL_NODE_FLAGS } from '../assets/runtime-flags.ts';
import { cacheRoot } from '../src/payload/manifest.ts';
import { NODE, type BenchPki } from './pki.ts';
import { firstJsonLine, gauges, startProc, waitUntil, type Proc } from './procs.ts';
import { freePort } from '../test/ports.ts';

export type StackName = 'upstream' | 'upstream-connect' | 'kctl';

export interface Stack {
  name: StackName;
  /** GRPC frontend socket (not on upstream-connect). */
  grpcUds?: string;
  /** HTTP-CONNECT socket (not on upstream). */
  connectUds?: string;
  /** [server, agent] pids. */
  pids: [number, number];
  /** pending dials + established connections on the server + open endpoint connections on the agent. */
  tableEntries(): Promise<number>;
  stop(): Promise<void>;
}

const here = new URL('.', import.meta.url).pathname;

/** Directory of the upstream proxy-server/proxy-agent binaries; a clear failure when missing. */
export function upstreamBinDir(): string {
  const root = join(cacheRoot(), 'components');
  for (const d of existsSync(root) ? readdirSync(root) : []) {
    const lock = join(root, d, 'payload.lock.json');
    if (!existsSync(lock)) continue;
    const names = (JSON.parse(readFileSync(lock, 'utf8')) as { components: { name: string }[] }).components.map(
      (c) => c.name,
    );
    if (['proxy-server', 'proxy-agent'].every((n) => names.includes(n) && existsSync(join(root, d, 'bin', n))))
      return join(root, d, 'bin');
  }
  throw new Error(
    `upstream proxy-server/proxy-agent not found under ${root}; build the component payload first (npm run components)`,
  );
}

const SERVER_TABLES = [
  'konnectivity_network_proxy_server_pending_backend_dials',
  'konnectivity_network_proxy_server_established_connections',
];
const AGENT_TABLES = ['konnectivity_network_proxy_agent_open_endpoint_connections'];

async function stopAll(procs: Proc[]): Promise<void> {
  for (const p of procs.reverse()) await p.stop();
}

export interface UpstreamServerOptions {
  mode: 'grpc' | 'http-connect';
  /** The frontend's unix socket. */
  uds: string;
  agentPort: number;
  adminPort: number;
  healthPort: number;
  id: string;
  /** Where the agent port listens; 127.0.0.1 unless given. */
  agentBindAddress?: string;
}

/** Upstream's proxy-server alone, just spawned: ready once its health port answers /healthz. */
export function spawnUpstreamServer(pki: BenchPki, o: UpstreamServerOptions): Proc {
  return startProc('proxy-server', join(upstreamBinDir(), 'proxy-server'), upstreamServerArgs(pki, o));
}

/** Upstream proxy-server's arguments: one frontend on a unix socket, health and admin ports on 127.0.0.1, every timing upstream's default. */
export function upstreamServerArgs(pki: BenchPki, o: UpstreamServerOptions): string[] {
  return [
    '--mode',
    o.mode,
    '--uds-name',
    o.uds,
    '--delete-existing-uds-file',
    '--server-port',
    '0',
    '--cluster-cert',
    pki.serverCert,
    '--cluster-key',
    pki.serverKey,
    '--cluster-ca-cert',
    pki.ca,
    '--agent-port',
    String(o.agentPort),
    '--agent-bind-address',
    o.agentBindAddress ?? '127.0.0.1',
    '--admin-port',
    String(o.adminPort),
    '--health-port',
    String(o.healthPort),
    '--health-bind-address',
    '127.0.0.1',
    '--server-id',
    o.id,
    '--server-count',
    '1',
  ];
}

export interface UpstreamAgentOptions {
  serverHost: string;
  serverPort: number;
  healthPort: number;
  adminPort: number;
  /** --sync-interval (the first retry after a lost stream); upstream's default (1 s) unless given. */
  syncInterval?: string;
}

/** Upstream proxy-agent's arguments: the bench node's certificate, ports on 127.0.0.1, every timing upstream's default but `syncInterval`. */
export function upstreamAgentArgs(pki: BenchPki, o: UpstreamAgentOptions): string[] {
  return [
    '--proxy-server-host',
    o.serverHost,
    '--proxy-server-port',
    String(o.serverPort),
    '--ca-cert',
    pki.ca,
    '--agent-cert',
    pki.nodeCert,
    '--agent-key',
    pki.nodeKey,
    '--agent-id',
    NODE,
    '--agent-identifiers',
    `host=${NODE}`,
    '--health-server-host',
    '127.0.0.1',
    '--health-server-port',
    String(o.healthPort),
    '--admin-server-port',
    String(o.adminPort),
    ...(o.syncInterval ? ['--sync-interval', o.syncInterval] : []),
  ];
}

export async function startUpstream(
  pki: BenchPki,
  dir: string,
  mode: 'grpc' | 'http-connect' = 'grpc',
): Promise<Stack> {
  const bin = upstreamBinDir();
  const uds = join(dir, `upstream-${mode}-${Date.now()}.sock`);
  const [agentPort, serverAdmin, serverHealth, agentAdmin, agentHealth] = await Promise.all([
    freePort(),
    freePort(),
    freePort(),
    freePort(),
    freePort(),
  ]);
  const server = spawnUpstreamServer(pki, {
    mode,
    uds,
    agentPort,
    adminPort: serverAdmin,
    healthPort: serverHealth,
    id: `bench-upstream-${mode}`,
  });
  const agent = startProc(
    'proxy-agent',
    join(bin, 'proxy-agent'),
    upstreamAgentArgs(pki, {
      serverHost: '127.0.0.1',
      serverPort: agentPort,
      healthPort: agentHealth,
      adminPort: agentAdmin,
      syncInterval: '200ms',
    }),
  );
  try {
    await waitUntil(
      'upstream proxy-server ready with its agent',
      async () => (await fetch(`http://127.0.0.1:${serverHealth}/readyz`)).status === 200 && existsSync(uds),
      60_000,
      () => `${server.output()}\n${agent.output()}`,
      [server, agent],
    );
  } catch (err) {
    await stopAll([server, agent]);
    throw err;
  }
  return {
    name: mode === 'grpc' ? 'upstream' : 'upstream-connect',
    ...(mode === 'grpc' ? { grpcUds: uds } : { connectUds: uds }),
    pids: [server.pid, agent.pid],
    tableEntries: async () =>
      (await gauges(`http://127.0.0.1:${serverAdmin}/metrics`, SERVER_TABLES)) +
      (await gauges(`http://127.0.0.1:${agentAdmin}/metrics`, AGENT_TABLES)),
    stop: () => stopAll([server, agent]),
  };
}

/** What bench/kctl-server.ts is started with (its argv[2], as JSON). */
export interface KctlServerOptions {
  udsPath: string;
  connectUdsPath: string;
  agentPort: number;
  adminPort: number;
  cert: string;
  key: string;
  ca: string;
  /** The agent port's address; 127.0.0.1 unless given. */
  bindAddress?: string;
  /** Shorter keepalive bounds, for tests that cut links. */
  keepaliveTimeMs?: number;
  keepaliveTimeoutMs?: number;
}

/** kctl's server alone (bench/kctl-server.ts), just spawned: ready at its first stdout line. */
export function spawnKctlServer(o: KctlServerOptions, nodeFlags = KCTL_NODE_FLAGS): Proc {
  return startProc('kctl-server', process.execPath, [
    ...nodeFlags,
    '--import',
    'tsx',
    join(here, 'kctl-server.ts'),
    JSON.stringify(o),
  ]);
}

/** kctl's server and agent, run with the V8 flags dist/kctl bakes in unless `nodeFlags` says otherwise. */
export async function startKctl(pki: BenchPki, dir: string, nodeFlags = KCTL_NODE_FLAGS): Promise<Stack> {
  const stamp = Date.now();
  const o: KctlServerOptions = {
    udsPath: join(dir, `kctl-${stamp}.sock`),
    connectUdsPath: join(dir, `kctl-connect-${stamp}.sock`),
    agentPort: await freePort(),
    adminPort: await freePort(),
    cert: pki.serverCert,
    key: pki.serverKey,
    ca: pki.ca,
  };
  const agentAdmin = await freePort();
  const node = process.execPath;
  const server = spawnKctlServer(o, nodeFlags);
  try {
    await firstJsonLine(server);
  } catch (err) {
    await server.stop();
    throw err;
  }
  const agent = startProc('kctl-agent', node, [
    ...nodeFlags,
    '--import',
    'tsx',
    join(here, 'kctl-agent.ts'),
    JSON.stringify({
      serverPort: o.agentPort,
      adminPort: agentAdmin,
      ca: pki.ca,
      cert: pki.nodeCert,
      key: pki.nodeKey,
      agentId: NODE,
    }),
  ]);
  try {
    await firstJsonLine(agent);
    await waitUntil(
      'kctl server ready with its agent',
      async () => (await fetch(`http://127.0.0.1:${o.adminPort}/readyz`)).status === 200,
      30_000,
      () => server.output(),
      [server, agent],
    );
  } catch (err) {
    await stopAll([server, agent]);
    throw err;
  }
  return {
    name: 'kctl',
    grpcUds: o.udsPath,
    connectUds: o.connectUdsPath,
    pids: [server.pid, agent.pid],
    tableEntries: async () =>
      (await gauges(`http://127.0.0.1:${o.adminPort}/metrics`, SERVER_TABLES)) +
      (await gauges(`http://127.0.0.1:${agentAdmin}/metrics`, AGENT_TABLES)),
    stop: () => stopAll([server, agent]),
  };
}
