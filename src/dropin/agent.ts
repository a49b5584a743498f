// `kctl konnectivity-agent` (also `proxy-agent`), the drop-in for upstream's proxy-agent, as a
// list of components under the one manager: the servers' lease count (--count-server-leases), the
// health and admin endpoints laid out as upstream's, then the agent. cli/konnectivity-agent.ts
// turns upstream's flags into a DropinAgentConfig and runs the list until a signal.
import { setTimeout as sleep } from 'node:timers/promises';
import { messageOf, UserError } from '../base/errors.ts';
import type { Logger } from '../base/log.ts';
import type { Component } from '../base/component.ts';
import {
  endpointComponent,
  KonnectivityAgent,
  parseIdentifiers,
  serveAdmin,
  serveHealth,
} from '../konnectivity/index.ts';
import { KubeClient, credentialsFromKubeconfig, type KubeCredentials } from '../kube/client.ts';
import { ServerLeaseCounter, inClusterCredentials } from '../kube/server-leases.ts';

/** What the drop-in agent is asked to do (cli/konnectivity-agent.ts reads it from upstream's flags, checked as upstream checks them). */
export interface DropinAgentConfig {
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

/**
 * The drop-in agent as components: the servers' lease count (with
 * --count-server-leases; the agent waits for its first list, as upstream), the health and admin
 * endpoints, then the agent. The count is one object made first and handed to the agent (which
 * reads it) and to the lease component (which fills it).
 */
export function agentDropinComponents(c: DropinAgentConfig, log: Logger): AgentDropin {
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
        {
          name: 'server-connected',
          check: () => (agent.snapshot().servers.length > 0 ? null : 'no servers connected'),
        },
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
      ...(c.leases
        ? [leaseCounterComponent(leaseCredentials(c.leases), c.leases, leaseCount, agent.metrics, log)]
        : []),
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

function leaseCredentials(o: NonNullable<DropinAgentConfig['leases']>): KubeCredentials | (() => KubeCredentials) {
  try {
    return o.kubeconfig ? credentialsFromKubeconfig(o.kubeconfig) : inClusterCredentials();
  } catch (err) {
    throw new UserError(`--count-server-leases: ${messageOf(err)}`);
  }
}

/** Reads the servers' leases (as upstream, before the agent starts: it waits for the first list). */
function leaseCounterComponent(
  creds: KubeCredentials | (() => KubeCredentials),
  o: NonNullable<DropinAgentConfig['leases']>,
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
        (err) =>
          log.warn(
            { namespace: o.namespace, label: o.label },
            `cannot read the konnectivity servers' leases: ${err.message}`,
          ),
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
          log.info(
            { waitedSeconds: Math.round((told - since) / 1000) },
            "waiting for the first list of the servers' leases",
          );
        }
      }
      log.info(
        { namespace: o.namespace, label: o.label, servers: counter.count() },
        'counting konnectivity servers by their leases',
      );
    },
    stop: async () => {
      await count.counter?.stop();
    },
  };
}
