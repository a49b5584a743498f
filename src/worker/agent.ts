// The in-process konnectivity agent, authenticated with the node's own client certificate (the
// one kubelet got at TLS bootstrap); it dials every live controller's konnectivity server.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { splitHostPort } from '../base/addresses.ts';
import type { Component, ComponentContext, ComponentStatus } from '../base/component.ts';
import type { Logger } from '../base/log.ts';
import { KonnectivityAgent } from '../konnectivity/index.ts';
import type { LiveController } from '../kube/controller-leases.ts';
import type { ControllerFollower } from './controller-watch.ts';
import type { JoinState } from './join.ts';
import type { WorkerPaths } from './paths.ts';

/** kubelet's client certificate file holds the certificate and its key in one PEM. */
function splitPem(pem: string): { cert: string; key: string } {
  const cert = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----\n?/g)?.join('') ?? '';
  const key = /-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]+?-----END [A-Z ]*PRIVATE KEY-----\n?/.exec(pem)?.[0] ?? '';
  return { cert, key };
}

function hostPort(addr: string): { host: string; port: number } {
  const hp = splitHostPort(addr);
  if (!hp) throw new Error(`bad konnectivity address ${addr}`);
  return hp;
}

export class AgentComponent implements Component, ControllerFollower {
  readonly name = 'konnectivity-agent';
  private agent: KonnectivityAgent | null = null;
  private log!: Logger;

  constructor(
    private readonly paths: WorkerPaths,
    private readonly state: JoinState,
    /** The node: the agent's id, and the name and address it serves. */
    private readonly id: { nodeName: string; nodeIp: string },
  ) {}

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    const { cert, key } = splitPem(await readFile(join(this.paths.kubeletCertDir, 'kubelet-client-current.pem'), 'utf8'));
    this.agent = new KonnectivityAgent({
      servers: this.state.konnectivity.map(hostPort),
      ca: await readFile(this.paths.caCert),
      cert,
      key,
      agentId: this.id.nodeName,
      identifiers: {
        host: [this.id.nodeName],
        ipv4: this.id.nodeIp.includes(':') ? [] : [this.id.nodeIp],
        ipv6: this.id.nodeIp.includes(':') ? [this.id.nodeIp] : [],
      },
      log: this.log,
    });
    await this.agent.init();
    await this.agent.start();
  }

  // No ready(): connections come and go; the agent keeps dialing every controller on its own.

  async stop(): Promise<void> {
    await this.agent?.stop();
  }

  /** The live controllers' konnectivity servers are the ones to hold a stream to. */
  controllersChanged(live: LiveController[]): void {
    this.agent?.setServers(live.map((c) => hostPort(c.konnectivity)));
  }

  status(): Partial<ComponentStatus> {
    const servers = this.agent?.snapshot().servers.length ?? 0;
    return { lastError: this.agent && servers === 0 ? 'not connected to any konnectivity server yet' : undefined };
  }
}
