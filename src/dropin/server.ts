// `kctl konnectivity-server` (also `proxy-server`), the drop-in for upstream's proxy-server, as a
// list of components under the one manager: the health and admin endpoints laid out as upstream's,
// then the server with its lease (--enable-lease-controller). cli/konnectivity-server.ts turns
// upstream's flags into a DropinServerConfig and runs the list until a signal.
import type tls from 'node:tls';
import { messageOf, UserError } from '../base/errors.ts';
import type { Logger } from '../base/log.ts';
import type { Component } from '../base/component.ts';
import {
  endpointComponent,
  KonnectivityServer,
  serveAdmin,
  serveHealth,
  type ProxyStrategy,
  type TcpFrontend,
} from '../konnectivity/index.ts';
import { KubeClient, credentialsFromKubeconfig, type KubeCredentials } from '../kube/client.ts';
import { ServerLeasePublisher, inClusterCredentials } from '../kube/server-leases.ts';
import { serviceAccountTokenReview, serviceAccountUser } from '../kube/token-review.ts';

/** What the drop-in server is asked to do (cli/konnectivity-server.ts reads it from upstream's flags, checked as upstream checks them). */
export interface DropinServerConfig {
  serverId: string;
  serverCount: number;
  mode: 'grpc' | 'http-connect';
  /** Unix socket frontend, or TCP with mutual TLS. */
  uds?: { path: string; replace: boolean };
  tcp?: TcpFrontend;
  agent: { host: string; port: number; cert: Buffer; key: Buffer; ca?: Buffer };
  maxUnauthenticatedAgents: number;
  /** Service-account token authentication of agents. */
  tokenAuth?: { namespace: string; serviceAccount: string; audience: string };
  kubeconfig?: string;
  proxyStrategies: ProxyStrategy[];
  backendDialTimeoutMs: number;
  gracefulShutdownTimeoutMs: number;
  health: { host: string; port: number };
  admin: { host: string; port: number };
  profiling: boolean;
  contentionProfiling: boolean;
  leases?: { namespace: string; labels: Record<string, string> };
  tlsMinVersion: tls.SecureVersion;
  ciphers?: string;
  debug: boolean;
}

function kubeClient(kubeconfig: string | undefined): KubeClient {
  let creds: KubeCredentials | (() => KubeCredentials);
  try {
    creds = kubeconfig ? credentialsFromKubeconfig(kubeconfig) : inClusterCredentials();
  } catch (err) {
    throw new UserError(`cannot build a Kubernetes client for token review or leases: ${messageOf(err)}`);
  }
  return new KubeClient(creds);
}

export interface ServerDropin {
  components: Component[];
  server: KonnectivityServer;
  /** The endpoints' bound ports, once they listen. */
  ports(): { health: number; admin: number };
}

/**
 * The drop-in server as components: the health and admin endpoints, then the
 * server with its lease (--enable-lease-controller), so a stop ends the server (gracefully with
 * --graceful-shutdown-timeout) and its lease before the endpoints close.
 */
export function serverDropinComponents(c: DropinServerConfig, log: Logger): ServerDropin {
  const kube = c.tokenAuth || c.leases ? kubeClient(c.kubeconfig) : undefined;
  const server = new KonnectivityServer({
    serverId: c.serverId,
    serverCount: () => c.serverCount,
    udsPath: c.uds && c.mode === 'grpc' ? c.uds.path : undefined,
    httpConnectUdsPath: c.uds && c.mode === 'http-connect' ? c.uds.path : undefined,
    // As upstream (umask 0007): kube-apiserver in another container of the pod may share the group.
    udsMode: 0o770,
    replaceSockets: c.uds?.replace ?? true,
    tcpFrontend: c.tcp,
    agentBindAddress: c.agent.host,
    agentPort: c.agent.port,
    maxUnauthenticatedAgents: c.maxUnauthenticatedAgents,
    tls: { cert: c.agent.cert, key: c.agent.key, ca: c.agent.ca },
    agentAuth: 'upstream',
    tokenReview:
      kube && c.tokenAuth
        ? serviceAccountTokenReview(
            kube,
            c.tokenAuth.audience,
            serviceAccountUser(c.tokenAuth.namespace, c.tokenAuth.serviceAccount),
          )
        : undefined,
    proxyStrategies: c.proxyStrategies,
    dialTimeoutMs: c.backendDialTimeoutMs,
    log,
  });
  const health = endpointComponent('health-server', () =>
    serveHealth({
      ...c.health,
      registry: server.metrics.registry,
      readiness: 'server',
      checks: [{ name: 'agents', check: () => server.notReadyReason() }],
    }),
  );
  const admin = endpointComponent('admin-server', () =>
    serveAdmin({
      ...c.admin,
      metrics: { registry: server.metrics.registry },
      profiling: c.profiling,
      contentionProfiling: c.contentionProfiling,
    }),
  );
  let leases: ServerLeasePublisher | undefined;
  return {
    server,
    ports: () => ({ health: health.port(), admin: admin.port() }),
    components: [
      health,
      admin,
      {
        name: 'konnectivity-server',
        start: async () => {
          await server.init();
          await server.start();
          leases = c.leases && kube ? startLeases(kube, c.serverId, c.leases, server, log) : undefined;
        },
        stop: async () => {
          if (c.gracefulShutdownTimeoutMs > 0) await server.stopGracefully(c.gracefulShutdownTimeoutMs);
          else await server.stop();
          await leases?.stop().catch((err: Error) => log.warn(`could not delete this server's lease: ${err.message}`));
        },
      },
    ],
  };
}

function startLeases(
  kube: KubeClient,
  serverId: string,
  o: NonNullable<DropinServerConfig['leases']>,
  server: KonnectivityServer,
  log: Logger,
): ServerLeasePublisher {
  const m = server.metrics;
  const publisher = new ServerLeasePublisher(kube, {
    serverId,
    namespace: o.namespace,
    labels: o.labels,
    observe: {
      list: (code, reason, s) => {
        m.leaseLists.inc({ http_status_code: String(code), reason });
        m.leaseListLatency.observe({ http_status_code: String(code) }, s);
      },
      delete: (code, reason, s) => {
        m.leaseDeletes.inc({ http_status_code: String(code), reason });
        m.leaseDeleteLatency.observe({ http_status_code: String(code) }, s);
      },
      culled: () => m.culledLeases.inc(),
    },
    onError: (err) => log.warn({ namespace: o.namespace }, `server lease: ${err.message}`),
  });
  publisher.start();
  log.info({ lease: publisher.leaseName, namespace: o.namespace, labels: o.labels }, "publishing this server's lease");
  return publisher;
}
