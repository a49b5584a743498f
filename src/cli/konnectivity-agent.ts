// `kctl konnectivity-agent`, or kctl invoked as `proxy-agent`: the in-process agent as a drop-in
// for upstream's proxy-agent (v0.36.0). It takes upstream's flags in pflag's forms with upstream's
// defaults, serves the same endpoints on the same ports, exports the same metric families and
// drains on the first SIGTERM like upstream. Extension: --proxy-server-host may be repeated (or
// comma-separated) to hold a connection to every controller without a load balancer.
import type { Command } from 'commander';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { messageOf, UserError } from '../base/errors.ts';
import { componentLogger, createLogger, type Logger } from '../base/log.ts';
import type { Component } from '../base/component.ts';
import { runUntilSignal } from '../base/lifecycle.ts';
import { ComponentManager } from '../base/manager.ts';
import { endpointComponent, KonnectivityAgent, parseIdentifiers, serveAdmin, serveHealth } from '../konnectivity/index.ts';
import { KubeClient, credentialsFromKubeconfig, type KubeCredentials } from '../kube/client.ts';
import { ServerLeaseCounter, inClusterCredentials } from '../kube/server-leases.ts';
import { AGENT_FLAGS } from './flags/agent-flags.ts';
import { parseGoDuration, readFlagFile, standaloneCommand } from './flags/standalone.ts';
import { inertFlagsSet, parsePflags, renderPflagHelp, type FlagSpec, type FlagValue } from './flags/pflag.ts';

/** Flags kctl's agent adds to upstream's. */
const KCTL_FLAGS: readonly FlagSpec[] = [{ name: 'debug', kind: 'bool', default: 'false', help: 'kctl: debug logs (as -v=5 or more does)' }];
const FLAGS = [...AGENT_FLAGS, ...KCTL_FLAGS];

const DESCRIPTION = `A gRPC agent, Connects to the proxy and then allows traffic to be forwarded to it.

kctl's konnectivity agent, a drop-in for upstream's proxy-agent v0.36.0: the same flags, endpoints,
metric families and signal handling (the first SIGTERM drains, the second stops). kctl extension:
--proxy-server-host may be repeated or comma-separated, to hold a stream to every controller.`;

/** What the flags ask for, checked as upstream's Validate checks them. */
export interface AgentCliConfig {
  servers: { host: string; port: number }[];
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  serviceAccountTokenPath?: string;
  agentId: string;
  identifiers?: string;
  alpn: string[];
  syncIntervalMs: number;
  syncIntervalCapMs: number;
  syncForever: boolean;
  health: { host: string; port: number };
  /** --count-server-leases: where the leases are read from. */
  leases?: { kubeconfig?: string; namespace: string; label: string; source: 'default' | 'max' };
  admin: { host: string; port: number };
  profiling: boolean;
  contentionProfiling: boolean;
  debug: boolean;
}

export function agentConfig(cmd: string, values: Map<string, FlagValue>, env = process.env): AgentCliConfig {
  const str = (n: string) => String(values.get(n) ?? '');
  const bool = (n: string) => values.get(n) === true;
  const port = (n: string): number => {
    const p = Number(str(n));
    if (!Number.isInteger(p) || p <= 0 || p > 65535) throw new UserError(`${cmd}: --${n} ${str(n)} must be a port between 1 and 65535`);
    return p;
  };
  const duration = (n: string) => parseGoDuration(`${cmd}: --${n}`, str(n));
  const file = (n: string) => (str(n) ? readFlagFile(cmd, n, str(n)) : undefined);

  const hosts = str('proxy-server-host')
    .split(',')
    .map((h) => h.trim())
    .filter(Boolean);
  if (hosts.length === 0) throw new UserError(`${cmd}: --proxy-server-host is empty; give the konnectivity server's address`);
  const serverPort = port('proxy-server-port');
  const cert = file('agent-cert');
  const key = file('agent-key');
  if (key && !cert) throw new UserError(`${cmd}: --agent-key is set but --agent-cert is empty; pass both or neither`);
  if (cert && !key) throw new UserError(`${cmd}: --agent-cert is set but --agent-key is empty; pass both or neither`);
  const tokenPath = str('service-account-token-path') || undefined;
  if (tokenPath) readFlagFile(cmd, 'service-account-token-path', tokenPath);
  if (!cert && !tokenPath)
    throw new UserError(`${cmd}: pass --agent-cert and --agent-key (a node certificate) or --service-account-token-path to prove who this agent is`);
  if (str('kubeconfig')) readFlagFile(cmd, 'kubeconfig', str('kubeconfig'));
  if (Number(str('xfr-channel-size')) <= 0) throw new UserError(`${cmd}: --xfr-channel-size ${str('xfr-channel-size')} must be greater than 0`);
  if (bool('enable-contention-profiling') && !bool('enable-profiling'))
    throw new UserError(`${cmd}: --enable-contention-profiling needs --enable-profiling too`);
  const syncIntervalMs = duration('sync-interval');
  const syncIntervalCapMs = duration('sync-interval-cap');
  if (syncIntervalMs > syncIntervalCapMs)
    throw new UserError(`${cmd}: --sync-interval ${str('sync-interval')} must not be longer than --sync-interval-cap ${str('sync-interval-cap')}`);
  duration('probe-interval');
  duration('keepalive-time');
  const identifiers = str('agent-identifiers') || undefined;
  if (identifiers) parseIdentifiers(identifiers);
  const source = str('server-count-source');
  if (source !== 'default' && source !== 'max') throw new UserError(`${cmd}: --server-count-source "${source}" must be default or max`);

  return {
    servers: hosts.map((host) => ({ host, port: serverPort })),
    ca: file('ca-cert'),
    cert,
    key,
    serviceAccountTokenPath: tokenPath,
    agentId: str('agent-id') || env.PROXY_AGENT_ID || randomUUID(),
    identifiers,
    alpn: values.get('alpn-proto') as string[],
    syncIntervalMs,
    syncIntervalCapMs,
    syncForever: bool('sync-forever'),
    health: { host: str('health-server-host'), port: port('health-server-port') },
    admin: { host: str('admin-bind-address'), port: port('admin-server-port') },
    profiling: bool('enable-profiling'),
    contentionProfiling: bool('enable-contention-profiling'),
    debug: bool('debug') || Number(str('v')) >= 5,
    leases: bool('count-server-leases')
      ? { kubeconfig: str('kubeconfig') || undefined, namespace: str('lease-namespace'), label: str('lease-label'), source }
      : undefined,
  };
}

/**
 * Runs the agent until stopped: the first SIGTERM or SIGINT drains (every server is told, new
 * dials are refused, open connections keep working, the process stays up), the second stops it
 * and the process exits 0.
 */
export async function runAgentCli(argv: readonly string[], cmd: string): Promise<void> {
  const parsed = parsePflags(cmd, FLAGS, argv);
  if (parsed.help) {
    process.stdout.write(renderPflagHelp(cmd, DESCRIPTION, FLAGS));
    return;
  }
  if (parsed.args.length > 0) throw new UserError(`${cmd}: unexpected argument "${parsed.args[0]}"; it takes only flags (see ${cmd} --help)`);
  const c = agentConfig(cmd, parsed.values);
  const root = createLogger({ debug: c.debug });
  const log = componentLogger(root, 'konnectivity-agent');
  const inert = inertFlagsSet(FLAGS, parsed);
  if (inert.length) log.warn({ flags: inert }, `accepted for compatibility, no effect in kctl: ${inert.join(', ')}`);

  const { components, agent, ports } = agentDropinComponents(cmd, c, log);
  const manager = new ComponentManager(components, componentLogger(root, 'manager'));
  // As upstream: the first SIGTERM or SIGINT drains, the second stops (exit 0), a third is the signal's own.
  await runUntilSignal(manager, log, {
    drain: () => agent.drain(),
    signalWhileStopping: 'default',
    onReady: () => log.info({ servers: c.servers.map((s) => `${s.host}:${s.port}`), agentId: c.agentId, ...ports() }, 'konnectivity agent started'),
    onStopped: () => log.info('konnectivity agent stopped'),
  });
}

/**
 * The drop-in agent as components, from its flags: the servers' lease count (with
 * --count-server-leases; the agent waits for its first list, as upstream), the health and admin
 * endpoints, then the agent. The count is one object made first and handed to the agent (which
 * reads it) and to the lease component (which fills it).
 */
export function agentDropinComponents(cmd: string, c: AgentCliConfig, log: Logger): AgentDropin {
  const leaseCount = new LeaseCount();
  const agent = new KonnectivityAgent({
    servers: c.servers,
    ca: c.ca,
    cert: c.cert,
    key: c.key,
    serviceAccountTokenPath: c.serviceAccountTokenPath,
    agentId: c.agentId,
    identifiers: c.identifiers ? parseIdentifiers(c.identifiers) : undefined,
    syncIntervalMs: c.syncIntervalMs,
    syncIntervalCapMs: c.syncIntervalCapMs,
    syncForever: c.syncForever,
    alpnProtocols: c.alpn,
    serverCounter: c.leases ? leaseCount : undefined,
    serverCountSource: c.leases?.source,
    log,
  });
  const health = endpointComponent('health-server', () =>
    serveHealth({
      ...c.health,
      registry: agent.metrics.registry,
      checks: [
        { name: 'ping', check: () => null },
        { name: 'server-connected', check: () => (agent.snapshot().servers.length > 0 ? null : 'no servers connected') },
      ],
    }),
  );
  const admin = endpointComponent('admin-server', () =>
    serveAdmin({
      ...c.admin,
      metrics: { redirectToPort: health.port() },
      profiling: c.profiling,
      contentionProfiling: c.contentionProfiling,
    }),
  );
  return {
    agent,
    ports: () => ({ health: health.port(), admin: admin.port() }),
    components: [
      ...(c.leases ? [leaseCounterComponent(leaseCredentials(cmd, c.leases), c.leases, leaseCount, agent.metrics, log)] : []),
      health,
      admin,
      {
        name: agent.name,
        start: () => agent.start(),
        // Draining is the first signal's job; the stop closes at once, as upstream's second signal.
        stop: () => agent.stop({ drain: false }),
        status: () => agent.status(),
      },
    ],
  };
}

export interface AgentDropin {
  components: Component[];
  /** The first signal drains it. */
  agent: KonnectivityAgent;
  /** The endpoints' bound ports, once they listen. */
  ports(): { health: number; admin: number };
}

/** The longest a timer waits (2^31-1 ms, about 24 days): "until it happens". */
const FOREVER_MS = 2 ** 31 - 1;

/** The servers' count as their leases say; 1 until the lease component runs. */
class LeaseCount {
  counter: ServerLeaseCounter | undefined;
  count(): number {
    return this.counter?.count() ?? 1;
  }
}

function leaseCredentials(cmd: string, o: NonNullable<AgentCliConfig['leases']>): KubeCredentials | (() => KubeCredentials) {
  try {
    return o.kubeconfig ? credentialsFromKubeconfig(o.kubeconfig) : inClusterCredentials();
  } catch (err) {
    throw new UserError(`${cmd}: --count-server-leases: ${messageOf(err)}`);
  }
}

/** Reads the servers' leases (as upstream, before the agent starts: it waits for the first list). */
function leaseCounterComponent(
  creds: KubeCredentials | (() => KubeCredentials),
  o: NonNullable<AgentCliConfig['leases']>,
  count: LeaseCount,
  m: KonnectivityAgent['metrics'],
  log: Logger,
): Component {
  return {
    name: 'server-leases',
    start: async () => {
      const counter = new ServerLeaseCounter(
        new KubeClient(creds),
        o.namespace,
        o.label,
        {
          list: (code, reason, seconds) => {
            m.leaseLists.inc({ http_response_code: String(code), reason });
            m.leaseListLatency.observe({ http_response_code: String(code) }, seconds);
          },
          watch: (code, reason) => m.leaseWatches.inc({ http_response_code: String(code), reason }),
        },
        (err) => log.warn({ namespace: o.namespace, label: o.label }, `cannot read the konnectivity servers' leases: ${err.message}`),
      );
      count.counter = counter;
      counter.start();
    },
    // As upstream, the agent waits for the first list however long it takes.
    readyTimeoutMs: FOREVER_MS,
    ready: async (signal) => {
      const counter = count.counter!;
      const since = Date.now();
      let told = since;
      while (!counter.synced) {
        await sleep(100, undefined, { signal });
        if (Date.now() - told >= 10_000) {
          told = Date.now();
          log.info({ waitedSeconds: Math.round((told - since) / 1000) }, "waiting for the first list of the servers' leases");
        }
      }
      log.info({ namespace: o.namespace, label: o.label, servers: counter.count() }, 'counting konnectivity servers by their leases');
    },
    stop: async () => {
      await count.counter?.stop();
    },
  };
}

/** `kctl konnectivity-agent` in kctl --help. */
export function konnectivityAgentCommand(program: Command): void {
  standaloneCommand(
    program,
    'konnectivity-agent',
    "run a standalone konnectivity agent: a drop-in for upstream's proxy-agent v0.36.0, with its flags (see konnectivity-agent --help)",
    runAgentCli,
  );
}
