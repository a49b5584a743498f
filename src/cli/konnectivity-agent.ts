// `kctl konnectivity-agent`, or kctl invoked as `proxy-agent`: the in-process agent as a drop-in
// for upstream's proxy-agent (v0.36.0). It takes upstream's flags in pflag's forms with upstream's
// defaults, serves the same endpoints on the same ports, exports the same metric families and
// drains on the first SIGTERM like upstream. Extension: --proxy-server-host may be repeated (or
// comma-separated) to hold a connection to every controller without a load balancer.
import type { Command } from 'commander';
import { randomUUID } from 'node:crypto';
import { UserError } from '../base/errors.ts';
import { componentLogger, createLogger } from '../base/log.ts';
import { runUntilSignal } from '../base/lifecycle.ts';
import { ComponentManager } from '../base/manager.ts';
import { parseIdentifiers } from '../konnectivity/index.ts';
import { agentDropinComponents, type DropinAgentConfig } from '../dropin/agent.ts';
import { AGENT_FLAGS } from './flags/agent-flags.ts';
import { parseGoDuration, readFlagFile, standaloneCommand } from './flags/standalone.ts';
import { inertFlagsSet, parsePflags, renderPflagHelp, type FlagSpec, type FlagValue } from './flags/pflag.ts';

/** Flags kctl's agent adds to upstream's. */
const KCTL_FLAGS: readonly FlagSpec[] = [
  { name: 'debug', kind: 'bool', default: 'false', help: 'kctl: debug logs (as -v=5 or more does)' },
];
const FLAGS = [...AGENT_FLAGS, ...KCTL_FLAGS];

const DESCRIPTION = `A gRPC agent, Connects to the proxy and then allows traffic to be forwarded to it.

kctl's konnectivity agent, a drop-in for upstream's proxy-agent v0.36.0: the same flags, endpoints,
metric families and signal handling (the first SIGTERM drains, the second stops). kctl extension:
--proxy-server-host may be repeated or comma-separated, to hold a stream to every controller.`;

export function agentConfig(cmd: string, values: Map<string, FlagValue>, env = process.env): DropinAgentConfig {
  const str = (n: string) => String(values.get(n) ?? '');
  const bool = (n: string) => values.get(n) === true;
  const port = (n: string): number => {
    const p = Number(str(n));
    if (!Number.isInteger(p) || p <= 0 || p > 65535)
      throw new UserError(`${cmd}: --${n} ${str(n)} must be a port between 1 and 65535`);
    return p;
  };
  const duration = (n: string) => parseGoDuration(`${cmd}: --${n}`, str(n));
  const file = (n: string) => (str(n) ? readFlagFile(cmd, n, str(n)) : undefined);

  const hosts = str('proxy-server-host')
    .split(',')
    .map((h) => h.trim())
    .filter(Boolean);
  if (hosts.length === 0)
    throw new UserError(`${cmd}: --proxy-server-host is empty; give the konnectivity server's address`);
  const serverPort = port('proxy-server-port');
  const cert = file('agent-cert');
  const key = file('agent-key');
  if (key && !cert) throw new UserError(`${cmd}: --agent-key is set but --agent-cert is empty; pass both or neither`);
  if (cert && !key) throw new UserError(`${cmd}: --agent-cert is set but --agent-key is empty; pass both or neither`);
  const tokenPath = str('service-account-token-path') || undefined;
  if (tokenPath) readFlagFile(cmd, 'service-account-token-path', tokenPath);
  if (!cert && !tokenPath)
    throw new UserError(
      `${cmd}: pass --agent-cert and --agent-key (a node certificate) or --service-account-token-path to prove who this agent is`,
    );
  if (str('kubeconfig')) readFlagFile(cmd, 'kubeconfig', str('kubeconfig'));
  if (Number(str('xfr-channel-size')) <= 0)
    throw new UserError(`${cmd}: --xfr-channel-size ${str('xfr-channel-size')} must be greater than 0`);
  if (bool('enable-contention-profiling') && !bool('enable-profiling'))
    throw new UserError(`${cmd}: --enable-contention-profiling needs --enable-profiling too`);
  const syncIntervalMs = duration('sync-interval');
  const syncIntervalCapMs = duration('sync-interval-cap');
  if (syncIntervalMs > syncIntervalCapMs)
    throw new UserError(
      `${cmd}: --sync-interval ${str('sync-interval')} must not be longer than --sync-interval-cap ${str('sync-interval-cap')}`,
    );
  duration('probe-interval');
  duration('keepalive-time');
  const identifiers = str('agent-identifiers') || undefined;
  if (identifiers) parseIdentifiers(identifiers);
  const source = str('server-count-source');
  if (source !== 'default' && source !== 'max')
    throw new UserError(`${cmd}: --server-count-source "${source}" must be default or max`);

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
      ? {
          kubeconfig: str('kubeconfig') || undefined,
          namespace: str('lease-namespace'),
          label: str('lease-label'),
          source,
        }
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
  if (parsed.args.length > 0)
    throw new UserError(`${cmd}: unexpected argument "${parsed.args[0]}"; it takes only flags (see ${cmd} --help)`);
  const c = agentConfig(cmd, parsed.values);
  const root = createLogger({ debug: c.debug });
  const log = componentLogger(root, 'konnectivity-agent');
  const inert = inertFlagsSet(FLAGS, parsed);
  if (inert.length) log.warn({ flags: inert }, `accepted for compatibility, no effect in kctl: ${inert.join(', ')}`);

  const { components, agent, ports } = agentDropinComponents(c, log);
  const manager = new ComponentManager(components, componentLogger(root, 'manager'));
  // As upstream: the first SIGTERM or SIGINT drains, the second stops (exit 0), a third is the signal's own.
  await runUntilSignal(manager, log, {
    drain: () => agent.drain(),
    signalWhileStopping: 'default',
    onReady: () =>
      log.info(
        { servers: c.servers.map((s) => `${s.host}:${s.port}`), agentId: c.agentId, ...ports() },
        'konnectivity agent started',
      ),
    onStopped: () => log.info('konnectivity agent stopped'),
  });
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
