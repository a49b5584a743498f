// The in-process konnectivity server as a controller component, and the egress selector
// file that points kube-apiserver's "cluster" traffic at it over a unix socket: HTTP-CONNECT by
// default (a dial is one CONNECT line and one answer, where GRPC sets up an HTTP/2 connection
// per dial), or GRPC when spec.konnectivity.proxyProtocol says so.
import { readFile } from 'node:fs/promises';
import { writeFileAtomic } from '../../base/fs.ts';
import { stringify } from 'yaml';
import {
  KonnectivityServer,
  type NodeDirectory,
  type TokenReview,
  type TrustedAgents,
} from '../../konnectivity/index.ts';
import type { KubeClient } from '../../kube/client.ts';
import type { LiveController } from '../../kube/controller-leases.ts';
import { serviceAccountTokenReview } from '../../kube/token-review.ts';
import type { Logger } from '../../base/log.ts';
import type { PkiPaths } from '../../pki/index.ts';
import type { Component, ComponentContext, ComponentStatus } from '../../base/component.ts';
import type { ClusterConfig } from '../config/config.ts';
import type { ControllerPaths } from '../config/paths.ts';
import { doorOnly } from '../config/urls.ts';
import { messageOf } from '../../base/errors.ts';
import type { Socket } from 'node:net';

/** The service account an upstream proxy-agent (in a pod) would use. */
export const AGENT_SERVICE_ACCOUNT = 'system:serviceaccount:kube-system:konnectivity-agent';

/** spec.konnectivity.trustedAgents as the server takes it (service accounts as Kubernetes user names). */
export function trustedAgents(cfg: ClusterConfig): TrustedAgents {
  const list = cfg.spec.konnectivity.trustedAgents;
  return {
    nodes: list.flatMap((a) => (a.node ? [a.node] : [])),
    users: list.flatMap((a) =>
      a.serviceAccount ? [`system:serviceaccount:${a.serviceAccount.replace('/', ':')}`] : [],
    ),
  };
}

export type ProxyProtocol = ClusterConfig['spec']['konnectivity']['proxyProtocol'];

export function egressSelectorConfig(paths: ControllerPaths, proxyProtocol: ProxyProtocol): string {
  const udsName = proxyProtocol === 'GRPC' ? paths.konnectivitySocket : paths.konnectivityConnectSocket;
  return stringify({
    apiVersion: 'apiserver.k8s.io/v1beta1',
    kind: 'EgressSelectorConfiguration',
    egressSelections: [{ name: 'cluster', connection: { proxyProtocol, transport: { uds: { udsName } } } }],
  });
}

export async function writeEgressSelectorConfig(paths: ControllerPaths, proxyProtocol: ProxyProtocol): Promise<void> {
  await writeFileAtomic(paths.egressConfig, egressSelectorConfig(paths, proxyProtocol), 0o644);
}

/** The agents this controller's konnectivity server holds now: what its lease lists. */
export interface HeldAgents {
  agentIds(): string[];
}

/** Reviews an upstream agent's service-account token with the controller's shared API client. */
export function tokenReview(kube: KubeClient): TokenReview {
  return serviceAccountTokenReview(kube, 'system:konnectivity-server', AGENT_SERVICE_ACCOUNT);
}

/** How long a dial waits for an expected agent (kubectl's exec and logs give up after longer). */
const AGENT_WAIT_MS = 5_000;
/** For this long after its start, the server expects any agent: they are coming back. */
const YOUNG_MS = 60_000;

export class KonnectivityServerComponent implements Component, HeldAgents {
  readonly name = 'konnectivity-server';
  private server: KonnectivityServer | null = null;
  private log!: Logger;
  private startedAt = 0;
  private lastError: string | undefined;

  constructor(
    private readonly cfg: ClusterConfig,
    private readonly paths: ControllerPaths,
    private readonly pki: PkiPaths,
    private readonly kube: KubeClient,
    private readonly nodes: NodeDirectory,
    /** The live controllers (their leases): the server count every agent is told, and which agents each holds. */
    private readonly controllers: { serverCount(): number; liveControllers(): LiveController[] },
  ) {}

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
    await writeEgressSelectorConfig(this.paths, this.cfg.spec.konnectivity.proxyProtocol);
  }

  /**
   * An agent that may serve `host` should connect soon: this server has just started (after a
   * restart or an upgrade agents come back within seconds, while kube-apiserver already serves),
   * or a live controller's lease lists the agent of a node that reports `host` (it holds it now).
   */
  private agentExpected(host: string): boolean {
    if (!this.startedAt || Date.now() - this.startedAt < YOUNG_MS) return true;
    const nodes = this.nodes.owners(host);
    return nodes.length > 0 && this.controllers.liveControllers().some((c) => c.agents.some((a) => nodes.includes(a)));
  }

  /** The agents the server holds now (none before it runs). */
  agentIds(): string[] {
    return this.server?.agentIds() ?? [];
  }

  /** An agent's connection the host's front door handed on (closed when the server does not run). */
  acceptFromDoor(socket: Socket, client: string): void {
    if (this.server) this.server.acceptFromDoor(socket, client);
    else socket.destroy();
  }

  /** The tunnel's state for `kctl status`, once the server runs. */
  snapshot(): ReturnType<KonnectivityServer['snapshot']> | undefined {
    return this.server?.snapshot();
  }

  async start(): Promise<void> {
    const [cert, key, ca] = await Promise.all([
      readFile(this.pki.konnectivityCert),
      readFile(this.pki.konnectivityKey),
      readFile(this.pki.caCert),
    ]);
    this.server = new KonnectivityServer({
      udsPath: this.paths.konnectivitySocket,
      httpConnectUdsPath: this.paths.konnectivityConnectSocket,
      agentPort: this.cfg.spec.konnectivity.agentPort,
      // Only the door open: agents arrive through it (handed over in this process), none at the port.
      ...(doorOnly(this.cfg) ? { agentBindAddress: '127.0.0.1' } : {}),
      maxUnauthenticatedAgents: this.cfg.spec.konnectivity.maxUnauthenticatedAgents,
      adminPort: this.cfg.spec.konnectivity.adminPort,
      tls: { cert, key, ca },
      tokenReview: tokenReview(this.kube),
      nodes: this.nodes,
      trustedAgents: trustedAgents(this.cfg),
      // A dial no agent may serve fails; it never goes to "any agent" (a node must not draw traffic it does not own).
      proxyStrategies: ['destHost'],
      serverCount: () => this.controllers.serverCount(),
      // Node to node, for the pod network of nodes that reach nothing but the controllers (datagrams.ts).
      datagramRelay: this.cfg.spec.network.relay === 'controllers' ? {} : undefined,
      dialWait: { expected: (host) => this.agentExpected(host), waitMs: AGENT_WAIT_MS },
      log: this.log,
    });
    try {
      await this.server.init();
      await this.server.start();
    } catch (err) {
      this.lastError = messageOf(err);
      throw err;
    }
    this.startedAt = Date.now();
  }

  /** After the renewer renewed konnectivity.crt: new agent handshakes get it, open tunnels stay. */
  async reloadTls(): Promise<void> {
    // ca.crt too: a CA rotation's phase changes which node certificates the agent port accepts.
    const [cert, key, ca] = await Promise.all([
      readFile(this.pki.konnectivityCert),
      readFile(this.pki.konnectivityKey),
      readFile(this.pki.caCert),
    ]);
    this.server?.setTls({ cert, key, ca });
  }

  async ready(signal: AbortSignal): Promise<void> {
    await this.server?.ready(signal);
  }

  async stop(): Promise<void> {
    await this.server?.stop();
  }

  status(): ComponentStatus {
    const s = this.server?.status();
    return {
      ...(s ?? { name: this.name, state: 'pending', restarts: 0 }),
      name: this.name,
      lastError: s?.lastError ?? this.lastError,
      uptimeSeconds: this.startedAt ? Math.round((Date.now() - this.startedAt) / 1000) : undefined,
    };
  }
}
