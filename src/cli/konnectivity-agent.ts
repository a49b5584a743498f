// `kctl konnectivity-agent`: the in-process agent as a standalone drop-in for the upstream
// proxy-agent; it accepts the upstream flags. Extension: --proxy-server-host may be repeated
// (or comma-separated) to hold a connection to every controller without a load balancer.
import { Option, type Command } from 'commander';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { Component } from '../base/component.ts';
import { runUntilSignal } from '../base/lifecycle.ts';
import { ComponentManager } from '../base/manager.ts';
import { hostname } from 'node:os';
import { KonnectivityAgent, parseIdentifiers } from '../konnectivity/index.ts';
import { componentLogger } from '../base/log.ts';
import { parseDuration } from '../base/duration.ts';
import { UserError } from '../base/errors.ts';
import { loggerFor } from './globals.ts';

/** A Go duration flag in milliseconds; a one-line error naming the flag otherwise. */
export function parseGoDuration(flag: string, text: string): number {
  const ms = parseDuration(text);
  if (ms === null) throw new UserError(`${flag} "${text}" is not a duration; use e.g. 500ms, 1s, 5m`);
  return ms;
}

function readPem(flag: string, path: string | undefined): Buffer | undefined {
  if (!path) return undefined;
  try {
    return readFileSync(path);
  } catch (err) {
    throw new UserError(`${flag} ${path}: cannot read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
}

function port(flag: string, v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new UserError(`${flag} "${v}" is not a port (0-65535)`);
  return n;
}

interface AgentFlags {
  proxyServerHost: string[];
  proxyServerPort: string;
  caCert?: string;
  agentCert?: string;
  agentKey?: string;
  agentId?: string;
  agentIdentifiers?: string;
  serviceAccountTokenPath?: string;
  syncInterval: string;
  syncIntervalCap: string;
  probeInterval: string;
  syncForever?: boolean;
  keepaliveTime: string;
  healthServerPort: string;
  adminServerPort: string;
}

export function konnectivityAgentCommand(program: Command): void {
  const collect = (v: string, prev: string[]) => [...prev, ...v.split(',').filter(Boolean)];
  program
    .command('konnectivity-agent')
    .description('run a standalone konnectivity agent (drop-in for the upstream proxy-agent; takes its flags)')
    .option('--proxy-server-host <host>', 'server address; repeat (or comma-separate) to connect to every controller', collect, [])
    .option('--proxy-server-port <port>', 'server agent port', '8091')
    .option('--ca-cert <file>', 'CA that signed the server certificate')
    .option('--agent-cert <file>', 'client certificate (O=system:nodes, CN=system:node:<name>)')
    .option('--agent-key <file>', 'client key')
    .option('--agent-id <id>', 'unique agent id (default: host name)')
    .option('--agent-identifiers <query>', 'e.g. host=node1&ipv4=10.0.0.5 (kubelet traffic for these goes to this agent)')
    .option('--service-account-token-path <file>', 'service-account token instead of a client certificate')
    .option('--sync-interval <duration>', 'first reconnect delay', '1s')
    .option('--sync-interval-cap <duration>', 'reconnect delay cap', '10s')
    .option('--probe-interval <duration>', 'accepted for compatibility; connections are watched by keepalive', '1s')
    .option('--sync-forever', 'keep looking for more servers after holding servercount')
    .option('--keepalive-time <duration>', 'keepalive towards kctl servers (upstream servers: never below 30s)', '5s')
    .option('--health-server-port <port>', '/healthz and /readyz', '8093')
    .option('--admin-server-port <port>', '/metrics', '8094')
    .addOption(new Option('--v <level>', 'accepted for compatibility (use --debug)').hideHelp())
    .addOption(new Option('--logtostderr [bool]').hideHelp())
    .addOption(new Option('--alsologtostderr [bool]').hideHelp())
    .action(async (f: AgentFlags, cmd: Command) => {
      if (f.proxyServerHost.length === 0) throw new UserError('--proxy-server-host is required (the controller address)');
      const serverPort = port('--proxy-server-port', f.proxyServerPort);
      const ca = readPem('--ca-cert', f.caCert);
      if (!ca) throw new UserError('--ca-cert is required (the CA that signed the konnectivity server certificate)');
      const cert = readPem('--agent-cert', f.agentCert);
      const key = readPem('--agent-key', f.agentKey);
      if ((cert === undefined) !== (key === undefined)) throw new UserError('--agent-cert and --agent-key go together');
      if (!cert && !f.serviceAccountTokenPath)
        throw new UserError('pass --agent-cert/--agent-key (node certificate) or --service-account-token-path');
      const log = componentLogger(loggerFor(cmd), 'konnectivity-agent');
      const agent = new KonnectivityAgent({
        servers: f.proxyServerHost.map((host) => ({ host, port: serverPort })),
        ca,
        cert,
        key,
        serviceAccountTokenPath: f.serviceAccountTokenPath,
        agentId: f.agentId ?? hostname(),
        identifiers: f.agentIdentifiers ? parseIdentifiers(f.agentIdentifiers) : undefined,
        syncIntervalMs: parseGoDuration('--sync-interval', f.syncInterval),
        syncIntervalCapMs: parseGoDuration('--sync-interval-cap', f.syncIntervalCap),
        syncForever: f.syncForever === true,
        keepaliveTimeMs: parseGoDuration('--keepalive-time', f.keepaliveTime),
        log,
      });
      parseGoDuration('--probe-interval', f.probeInterval);
      const endpoints = httpEndpoints([
        [
          port('--health-server-port', f.healthServerPort),
          {
            '/healthz': async () => [200, 'ok'],
            '/readyz': async () => (agent.snapshot().servers.length > 0 ? [200, 'ok'] : [500, 'not connected to any proxy server']),
          },
        ],
        [port('--admin-server-port', f.adminServerPort), { '/metrics': async () => [200, await agent.metricsText()] }],
      ]);
      // No ready gate: like upstream's agent, it keeps dialing until a server answers.
      const agentComponent: Component = {
        name: 'konnectivity-agent',
        start: async () => {
          await agent.init();
          await agent.start();
        },
        stop: () => agent.stop(),
        status: () => agent.status(),
      };
      await runUntilSignal(new ComponentManager([endpoints, agentComponent], componentLogger(loggerFor(cmd), 'manager')), log, {
        onReady: () => log.info({ servers: f.proxyServerHost, agentId: f.agentId ?? hostname() }, 'konnectivity agent started'),
        onStopped: () => log.info('konnectivity agent stopped'),
      });
    });
}

type Routes = Record<string, () => Promise<[number, string]>>;

/** Plain-HTTP health and metrics listeners on loopback, as one component. */
function httpEndpoints(listeners: [number, Routes][]): Component {
  const servers: Server[] = [];
  return {
    name: 'endpoints',
    async start() {
      for (const [p, routes] of listeners) {
        const s = createServer((req, res) => {
          const route = routes[req.url ?? ''];
          if (!route) {
            res.writeHead(404).end();
            return;
          }
          void route().then(([code, body]) => res.writeHead(code, { 'content-type': 'text/plain' }).end(body));
        });
        servers.push(s);
        await new Promise<void>((resolve, reject) => {
          s.once('error', (err: NodeJS.ErrnoException) =>
            reject(new Error(`cannot listen on 127.0.0.1:${p} (${err.code ?? err.message}); pick another port`)),
          );
          s.listen(p, '127.0.0.1', () => resolve());
        });
      }
    },
    async stop() {
      await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
    },
  };
}
