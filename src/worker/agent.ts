// The in-process konnectivity agent, authenticated with the node's own client certificate (the
// one kubelet got at TLS bootstrap); it dials every live controller's konnectivity server.
// kubelet renews that certificate itself (CSR); the file is checked every 10 s and a new one is
// used for the connections made from then on (open streams stay: the server checked them once).
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { splitHostPort } from '../base/addresses.ts';
import type { Component, ComponentContext, ComponentStatus } from '../base/component.ts';
import type { Logger } from '../base/log.ts';
import { messageOf } from '../base/errors.ts';
import { CertificateWatch, type CertificateStatus } from '../pki/index.ts';
import { KonnectivityAgent, type AgentSnapshot, type ServerAddress } from '../konnectivity/index.ts';
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

/**
 * Where the agent reaches a controller's konnectivity server: through its host's front door by
 * name when the controller has one (one outbound port for the node), else its agent port.
 */
export function konnectivityServer(c: LiveController): ServerAddress {
  return c.frontDoor
    ? { ...hostPort(c.frontDoor.address), serverName: c.frontDoor.konnectivity }
    : hostPort(c.konnectivity);
}

const CHECK_EVERY_MS = 10_000;

export class AgentComponent implements Component, ControllerFollower {
  readonly name = 'konnectivity-agent';
  private agent: KonnectivityAgent | null = null;
  private log!: Logger;
  private readonly certs: CertificateWatch;
  private checkTimer: NodeJS.Timeout | undefined;
  private clientSerial: string | undefined;

  constructor(
    private readonly paths: WorkerPaths,
    private readonly state: JoinState,
    /** The node: the agent's id, and the name and address it serves. */
    private readonly id: { nodeName: string; nodeIp: string },
    /** Datagrams other nodes sent this one through the controllers (the pod network's relay). */
    private readonly onDatagram?: (fromNode: string, data: Buffer) => void,
  ) {
    const pki = this.paths.kubeletCertDir;
    this.certs = new CertificateWatch([
      { name: 'ca.crt', file: this.paths.caCert, kind: 'ca' },
      { name: 'kubelet-client', file: this.paths.kubeletClientPem, kind: 'leaf', renewedBy: 'kubelet' },
      { name: 'kubelet-serving', file: join(pki, 'kubelet-server-current.pem'), kind: 'leaf', renewedBy: 'kubelet' },
    ]);
  }

  /** The node's CA and kubelet's certificates, for `kctl status`. */
  certificates(): CertificateStatus[] {
    return this.certs.report();
  }

  private clientCertFile(): string {
    return this.paths.kubeletClientPem;
  }

  /** Checks the files; a renewed client certificate goes to the agent. */
  private async checkCertificates(): Promise<void> {
    const serial = (await this.certs.check()).find((c) => c.name === 'kubelet-client')?.serial;
    if (!serial || serial === this.clientSerial || !this.agent) return;
    const { cert, key } = splitPem(await readFile(this.clientCertFile(), 'utf8'));
    this.agent.setClientCertificate(cert, key);
    if (this.clientSerial !== undefined)
      this.log.info({ serial }, 'kubelet renewed the node client certificate; new connections use it');
    this.clientSerial = serial;
  }

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    const { cert, key } = splitPem(await readFile(this.clientCertFile(), 'utf8'));
    this.agent = new KonnectivityAgent({
      // The token's controllers (through the token's front door when it names one); then their leases.
      servers: this.state.frontDoor
        ? [{ ...hostPort(this.state.frontDoor.address), serverName: this.state.frontDoor.konnectivity }]
        : this.state.konnectivity.map(hostPort),
      ca: await readFile(this.paths.caCert),
      cert,
      key,
      agentId: this.id.nodeName,
      identifiers: {
        host: [this.id.nodeName],
        ipv4: this.id.nodeIp.includes(':') ? [] : [this.id.nodeIp],
        ipv6: this.id.nodeIp.includes(':') ? [this.id.nodeIp] : [],
      },
      // kube-apiserver dials this kubelet by the node's name: the agent takes it to the node's address.
      localNames: { [this.id.nodeName.toLowerCase()]: this.id.nodeIp },
      onDatagram: this.onDatagram,
      log: this.log,
    });
    await this.agent.init();
    await this.agent.start();
    await this.checkCertificates();
    this.checkTimer = setInterval(
      () =>
        void this.checkCertificates().catch((err: unknown) =>
          this.log.warn(`cannot check kubelet's certificates: ${messageOf(err)}`),
        ),
      CHECK_EVERY_MS,
    );
  }

  // No ready(): connections come and go; the agent keeps dialing every controller on its own.

  async stop(): Promise<void> {
    clearInterval(this.checkTimer);
    await this.agent?.stop();
  }

  /** The cluster's CA bundle changed (a CA rotation): new connections verify the servers with it. */
  trustChanged(caPem: string): void {
    this.agent?.setTrust(caPem);
  }

  /** The servers the agent holds a stream to (none before it started). */
  snapshot(): AgentSnapshot | undefined {
    return this.agent?.snapshot();
  }

  /** A datagram for another node, through the controllers; false when no controller stream can take it now. */
  sendDatagram(toNode: string, data: Buffer): boolean {
    return this.agent?.sendDatagram(toNode, data) ?? false;
  }

  /** A controller's host answers again (the API balancer saw it): retry its konnectivity server now. */
  hostAnswers(host: string): void {
    this.agent?.retrySoon(host);
  }

  /** The live controllers' konnectivity servers are the ones to hold a stream to. */
  controllersChanged(live: LiveController[]): void {
    this.agent?.setServers(live.map(konnectivityServer));
  }

  status(): Partial<ComponentStatus> {
    const servers = this.agent?.snapshot().servers.length ?? 0;
    return { lastError: this.agent && servers === 0 ? 'not connected to any konnectivity server yet' : undefined };
  }
}
