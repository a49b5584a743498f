// `kctl konnectivity-server`, or kctl invoked as `proxy-server`: the server that runs inside
// `kctl controller`, standalone, as a drop-in for upstream's proxy-server (v0.36.0). It takes
// upstream's flags in pflag's forms with upstream's defaults and checks them as upstream does,
// serves the same endpoints on the same ports and exports the same metric families. The first
// SIGTERM or SIGINT shuts it down (gracefully with --graceful-shutdown-timeout) and it exits 0;
// a second signal exits 1 at once.
import type { Command } from 'commander';
import { randomUUID } from 'node:crypto';
import tls from 'node:tls';
import { messageOf, UserError } from '../base/errors.ts';
import { componentLogger, createLogger } from '../base/log.ts';
import { runUntilSignal } from '../base/lifecycle.ts';
import { ComponentManager } from '../base/manager.ts';
import type { ProxyStrategy, TcpFrontend } from '../konnectivity/index.ts';
import { parseLeaseLabels } from '../kube/server-leases.ts';
import { inertFlagsSet, parsePflags, renderPflagHelp, type FlagSpec, type FlagValue } from './flags/pflag.ts';
import { SERVER_FLAGS } from './flags/server-flags.ts';
import { serverDropinComponents, type DropinServerConfig } from '../dropin/server.ts';
import { parseGoDuration, readFlagFile, standaloneCommand } from './flags/standalone.ts';

const KCTL_FLAGS: readonly FlagSpec[] = [
  { name: 'debug', kind: 'bool', default: 'false', help: 'kctl: debug logs (as -v=5 or more does)' },
  {
    name: 'max-unauthenticated-agents',
    kind: 'int',
    default: '256',
    help: 'kctl: connections to the agent port that have not authenticated yet, at most; at the cap a new one closes the oldest',
  },
];
const FLAGS = [...SERVER_FLAGS, ...KCTL_FLAGS];

const DESCRIPTION = `A gRPC proxy server, receives requests from the API server and forwards to the agent.

kctl's konnectivity server (the one kctl controller runs in-process), a drop-in for upstream's
proxy-server v0.36.0: the same flags, endpoints, metric families and signal handling. It serves
upstream's agents and kctl's; kctl's agents also get per-connection flow control.`;

/** Go's cipher suite names (crypto/tls CipherSuites) as OpenSSL names them. */
const CIPHERS: Record<string, string> = {
  TLS_AES_128_GCM_SHA256: 'TLS_AES_128_GCM_SHA256',
  TLS_AES_256_GCM_SHA384: 'TLS_AES_256_GCM_SHA384',
  TLS_CHACHA20_POLY1305_SHA256: 'TLS_CHACHA20_POLY1305_SHA256',
  TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA: 'ECDHE-ECDSA-AES128-SHA',
  TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA: 'ECDHE-ECDSA-AES256-SHA',
  TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA: 'ECDHE-RSA-AES128-SHA',
  TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA: 'ECDHE-RSA-AES256-SHA',
  TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256: 'ECDHE-ECDSA-AES128-GCM-SHA256',
  TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384: 'ECDHE-ECDSA-AES256-GCM-SHA384',
  TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256: 'ECDHE-RSA-AES128-GCM-SHA256',
  TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384: 'ECDHE-RSA-AES256-GCM-SHA384',
  TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256: 'ECDHE-RSA-CHACHA20-POLY1305',
  TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256: 'ECDHE-ECDSA-CHACHA20-POLY1305',
};
const TLS13_DEFAULT = 'TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256';
const TLS_VERSIONS: Record<string, tls.SecureVersion> = {
  VersionTLS10: 'TLSv1',
  VersionTLS11: 'TLSv1.1',
  VersionTLS12: 'TLSv1.2',
  VersionTLS13: 'TLSv1.3',
};
const STRATEGIES: readonly ProxyStrategy[] = ['default', 'destHost', 'defaultRoute'];

export function serverConfig(cmd: string, values: Map<string, FlagValue>, env = process.env): DropinServerConfig {
  const str = (n: string) => String(values.get(n) ?? '');
  const bool = (n: string) => values.get(n) === true;
  const int = (n: string) => Number(str(n));
  const file = (n: string) => (str(n) ? readFlagFile(cmd, n, str(n)) : undefined);
  const fail = (msg: string): never => {
    throw new UserError(`${cmd}: ${msg}`);
  };
  const pair = (certFlag: string, keyFlag: string): { cert?: Buffer; key?: Buffer } => {
    const cert = file(certFlag);
    const key = file(keyFlag);
    if (key && !cert) fail(`--${keyFlag} is set but --${certFlag} is empty; pass both or neither`);
    if (cert && !key) fail(`--${certFlag} is set but --${keyFlag} is empty; pass both or neither`);
    return { cert, key };
  };
  const server = pair('server-cert', 'server-key');
  const serverCa = file('server-ca-cert');
  const cluster = pair('cluster-cert', 'cluster-key');
  const clusterCa = file('cluster-ca-cert');

  const mode = str('mode');
  if (mode !== 'grpc' && mode !== 'http-connect') fail(`--mode "${mode}" must be grpc or http-connect`);
  const uds = str('uds-name');
  if (uds) {
    if (int('server-port') !== 0)
      fail(`--server-port must be 0 with --uds-name (the frontend is the unix socket), not ${str('server-port')}`);
    if (server.cert || serverCa)
      fail('--server-cert, --server-key and --server-ca-cert are for a TCP frontend; leave them empty with --uds-name');
  } else {
    if (!serverCa)
      fail(
        '--server-ca-cert is needed for a TCP frontend (kube-apiserver must present a client certificate); or use --uds-name',
      );
    if (!server.cert) fail('--server-cert and --server-key are needed for a TCP frontend: it serves TLS');
  }
  const port = (n: string, reservedOk = false): number => {
    const p = int(n);
    if (p > 49151) fail(`--${n} ${p} is an ephemeral port; use one from 1024 to 49151`);
    if (p < 1024 && !reservedOk) fail(`--${n} ${p} is a reserved port; use one from 1024 to 49151`);
    return p;
  };
  const serverPort = port('server-port', Boolean(uds));
  const agentPort = port('agent-port');
  const adminPort = port('admin-port');
  const healthPort = port('health-port');
  if (bool('enable-contention-profiling') && !bool('enable-profiling'))
    fail('--enable-contention-profiling needs --enable-profiling too');

  const tokenFlags = ['agent-namespace', 'agent-service-account', 'authentication-audience'];
  const usingTokens = tokenFlags.some((n) => str(n) !== '');
  if (usingTokens) {
    if (clusterCa)
      fail(
        '--cluster-ca-cert cannot be used with service-account token authentication of agents (--agent-namespace and friends)',
      );
    for (const n of tokenFlags)
      if (!str(n))
        fail(`--${n} is empty; token authentication of agents needs ${tokenFlags.map((f) => `--${f}`).join(', ')}`);
  }
  if (str('kubeconfig')) readFlagFile(cmd, 'kubeconfig', str('kubeconfig'));
  if (!cluster.cert || !cluster.key) fail('--cluster-cert and --cluster-key are needed: the agent port serves TLS');

  const strategies = str('proxy-strategies')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (strategies.length === 0) fail('--proxy-strategies is empty; give one or more of default, destHost, defaultRoute');
  for (const s of strategies)
    if (!STRATEGIES.includes(s as ProxyStrategy))
      fail(`--proxy-strategies: unknown strategy "${s}"; use default, destHost or defaultRoute`);
  if (int('xfr-channel-size') <= 0) fail(`--xfr-channel-size ${str('xfr-channel-size')} must be greater than 0`);

  const minVersion = str('tls-min-version');
  if (minVersion && !TLS_VERSIONS[minVersion])
    fail(`--tls-min-version "${minVersion}" must be VersionTLS10, VersionTLS11, VersionTLS12 or VersionTLS13`);
  const suites = values.get('cipher-suites') as string[];
  for (const c of suites)
    if (!CIPHERS[c]) fail(`--cipher-suites: ${c} is not supported, does not exist or is insecure`);
  let leaseLabels: Record<string, string> = {};
  if (bool('enable-lease-controller')) {
    try {
      leaseLabels = parseLeaseLabels(str('lease-label'));
    } catch (err) {
      fail(`--lease-label: ${messageOf(err)}`);
    }
  }
  // A Go duration here has no sign: a negative timeout is refused as not a duration.
  const graceful = parseGoDuration(`${cmd}: --graceful-shutdown-timeout`, str('graceful-shutdown-timeout'));
  const dialTimeout = parseGoDuration(`${cmd}: --backend-dial-timeout`, str('backend-dial-timeout'));
  const serverCount = int('server-count');
  if (serverCount < 1) fail(`--server-count ${serverCount} must be at least 1`);
  const maxUnauthenticated = int('max-unauthenticated-agents');
  if (maxUnauthenticated < 1) fail(`--max-unauthenticated-agents ${maxUnauthenticated} must be at least 1`);

  return {
    serverId: str('server-id') || env.PROXY_SERVER_ID || randomUUID(),
    serverCount,
    mode: mode as DropinServerConfig['mode'],
    uds: uds ? { path: uds, replace: bool('delete-existing-uds-file') } : undefined,
    tcp:
      !uds && server.cert && server.key && serverCa
        ? {
            mode: mode as TcpFrontend['mode'],
            host: str('server-bind-address'),
            port: serverPort,
            tls: { cert: server.cert, key: server.key, ca: serverCa },
          }
        : undefined,
    agent: { host: str('agent-bind-address'), port: agentPort, cert: cluster.cert!, key: cluster.key!, ca: clusterCa },
    maxUnauthenticatedAgents: maxUnauthenticated,
    tokenAuth: usingTokens
      ? {
          namespace: str('agent-namespace'),
          serviceAccount: str('agent-service-account'),
          audience: str('authentication-audience'),
        }
      : undefined,
    kubeconfig: str('kubeconfig') || undefined,
    proxyStrategies: strategies as ProxyStrategy[],
    backendDialTimeoutMs: dialTimeout,
    gracefulShutdownTimeoutMs: graceful,
    health: { host: str('health-bind-address'), port: healthPort },
    // Upstream's help says an empty admin address means localhost; kctl keeps pprof off other interfaces.
    admin: { host: str('admin-bind-address') || '127.0.0.1', port: adminPort },
    profiling: bool('enable-profiling'),
    contentionProfiling: bool('enable-contention-profiling'),
    leases: bool('enable-lease-controller') ? { namespace: str('lease-namespace'), labels: leaseLabels } : undefined,
    tlsMinVersion: TLS_VERSIONS[minVersion || 'VersionTLS12']!,
    ciphers: suites.length ? [...suites.map((c) => CIPHERS[c]!), TLS13_DEFAULT].join(':') : undefined,
    debug: bool('debug') || Number(str('v')) >= 5,
  };
}

/** Runs the server until a signal: the first shuts it down, a second exits 1 at once. */
export async function runServerCli(argv: readonly string[], cmd: string): Promise<void> {
  const parsed = parsePflags(cmd, FLAGS, argv);
  if (parsed.help) {
    process.stdout.write(renderPflagHelp(cmd, DESCRIPTION, FLAGS));
    return;
  }
  if (parsed.args.length > 0)
    throw new UserError(`${cmd}: unexpected argument "${parsed.args[0]}"; it takes only flags (see ${cmd} --help)`);
  const c = serverConfig(cmd, parsed.values);
  const root = createLogger({ debug: c.debug });
  const log = componentLogger(root, 'konnectivity-server');
  const inert = inertFlagsSet(FLAGS, parsed);
  if (inert.length) log.warn({ flags: inert }, `accepted for compatibility, no effect in kctl: ${inert.join(', ')}`);
  if (c.tlsMinVersion === 'TLSv1' || c.tlsMinVersion === 'TLSv1.1')
    log.warn(`--tls-min-version below TLS 1.2 is considered insecure (RFC 8996)`);
  if (!c.agent.ca && !c.tokenAuth)
    log.warn(
      'agents are not authenticated: any client that reaches the agent port may serve tunnels; pass --cluster-ca-cert, or --agent-namespace, --agent-service-account and --authentication-audience',
    );
  // Every TLS listener of this process (frontend and agent port) follows the flags.
  tls.DEFAULT_MIN_VERSION = c.tlsMinVersion;
  if (c.ciphers) tls.DEFAULT_CIPHERS = c.ciphers;

  const { components, server, ports } = serverDropinComponents(c, log);
  const manager = new ComponentManager(components, componentLogger(root, 'manager'));
  // As upstream: the first SIGTERM or SIGINT shuts down (exit 0), a second exits 1 at once.
  await runUntilSignal(manager, log, {
    signalWhileStopping: { exitCode: 1 },
    onReady: () =>
      log.info(
        {
          serverId: c.serverId,
          serverCount: c.serverCount,
          mode: c.mode,
          frontend: c.uds?.path ?? `${c.tcp?.host || '*'}:${c.tcp?.port}`,
          agentPort: server.agentPort(),
          ...ports(),
        },
        'konnectivity server started',
      ),
    onStopping: (signal) => {
      if (c.gracefulShutdownTimeoutMs > 0) log.info({ signal }, 'shutting down gracefully');
    },
    onStopped: () => log.info('konnectivity server stopped'),
  });
}

/** `kctl konnectivity-server` in kctl --help. */
export function konnectivityServerCommand(program: Command): void {
  standaloneCommand(
    program,
    'konnectivity-server',
    "run a standalone konnectivity server: a drop-in for upstream's proxy-server v0.36.0, with its flags (see konnectivity-server --help)",
    runServerCli,
  );
}
