// In-process approver for kubelet serving certificates (signer kubernetes.io/kubelet-serving).
// kube-controller-manager approves node *client* CSRs itself; serving CSRs need someone to
// check that a node asks only for its own name and addresses. Anything else is denied.
import { canonicalIp } from '../base/addresses.ts';
import type { Logger } from '../base/log.ts';
import { resourcePath, type KubeClient } from '../kube/client.ts';
import { Informer, type ListWatchOptions } from '../kube/informer.ts';
import type { Component, ComponentStatus } from '../base/component.ts';
import { parseCsr } from './csr-request.ts';

export interface Csr {
  metadata: { name: string };
  spec: { request: string; signerName: string; username: string; groups?: string[]; usages?: string[] };
  status?: { conditions?: { type: string }[] };
}

export interface NodeAddresses {
  name: string;
  addresses: { type: string; address: string }[];
}

const ALLOWED_USAGES = new Set(['digital signature', 'key encipherment', 'server auth']);

/** One spelling per address, so a CSR's "0:0::1" matches the Node's "::1". */
const sameIp = (ip: string): string => canonicalIp(ip) ?? ip;

export type Verdict = { approve: true; reason: string } | { approve: false; reason: string } | null;

/** Decide on one CSR; null means "not ours or not decidable yet" (e.g. the Node is not registered). */
export function judgeServingCsr(csr: Csr, node: NodeAddresses | undefined): Verdict {
  if (csr.spec.signerName !== 'kubernetes.io/kubelet-serving') return null;
  const m = /^system:node:(.+)$/.exec(csr.spec.username);
  if (!m || !(csr.spec.groups ?? []).includes('system:nodes')) return { approve: false, reason: `requester ${csr.spec.username} is not a node` };
  const nodeName = m[1]!;
  let req;
  try {
    req = parseCsr(Buffer.from(csr.spec.request, 'base64').toString('utf8'));
  } catch (err) {
    return { approve: false, reason: `request does not parse: ${(err as Error).message}` };
  }
  if (req.commonName !== `system:node:${nodeName}`) return { approve: false, reason: `subject CN ${req.commonName} is not the requesting node` };
  if (req.organizations.length !== 1 || req.organizations[0] !== 'system:nodes')
    return { approve: false, reason: 'subject O must be exactly system:nodes' };
  const usages = csr.spec.usages ?? [];
  if (!usages.includes('server auth') || usages.some((u) => !ALLOWED_USAGES.has(u)))
    return { approve: false, reason: `usages ${usages.join(',')} are not a serving certificate's` };
  if (req.otherNames > 0) return { approve: false, reason: 'only DNS and IP subject alternative names are allowed' };
  if (req.dnsNames.length + req.ipAddresses.length === 0) return { approve: false, reason: 'no subject alternative names' };
  if (!node) return null; // not registered yet: decide once the Node exists
  const dnsAllowed = new Set([nodeName, ...node.addresses.filter((a) => /DNS|Hostname/.test(a.type)).map((a) => a.address)]);
  const ipAllowed = new Set(node.addresses.filter((a) => /IP$/.test(a.type)).map((a) => sameIp(a.address)));
  const badDns = req.dnsNames.filter((d) => !dnsAllowed.has(d));
  const badIp = req.ipAddresses.map(sameIp).filter((ip) => !ipAllowed.has(ip));
  if (badDns.length || badIp.length) return { approve: false, reason: `names not owned by node ${nodeName}: ${[...badDns, ...badIp].join(', ')}` };
  return { approve: true, reason: `serving certificate for node ${nodeName} (${[...req.dnsNames, ...req.ipAddresses].join(', ')})` };
}

interface KubeNode {
  metadata: { name: string };
  status?: { addresses?: NodeAddresses['addresses'] };
}

const CSRS = '/apis/certificates.k8s.io/v1/certificatesigningrequests';
const RETRY_MS = 2000;

/**
 * Watches kubelet-serving CSRs and Nodes (list + watch, no polling): a CSR is judged when it
 * arrives, and again when its Node appears or changes addresses. One decision at a time.
 */
export class CsrApproverComponent implements Component {
  readonly name = 'csr-approver';
  private readonly csrs: Informer<Csr>;
  private readonly nodes: Informer<KubeNode>;
  private running = false;
  private queue: Promise<void> = Promise.resolve();
  /** Decided here but maybe not yet seen back through the watch: never judged twice. */
  private readonly decided = new Set<string>();
  private decisions = 0;
  private lastError: string | undefined;

  constructor(
    private readonly kube: KubeClient,
    private readonly log: Logger,
    watch: ListWatchOptions = {},
  ) {
    const onError = (err: Error) => {
      this.lastError = err.message;
    };
    this.csrs = new Informer<Csr>(
      kube,
      CSRS,
      { ...watch, fieldSelector: 'spec.signerName=kubernetes.io/kubelet-serving' },
      (type, csr) => {
        if (type === 'LIST') {
          this.lastError = undefined;
          for (const name of this.decided) if (!this.csrs.store.has(name)) this.decided.delete(name);
          this.considerAll();
        } else if (type === 'DELETED') this.decided.delete(csr!.metadata.name);
        else this.consider(csr!.metadata.name);
      },
      onError,
    );
    this.nodes = new Informer<KubeNode>(
      kube,
      '/api/v1/nodes',
      watch,
      (type, node) => {
        if (type === 'LIST') this.considerAll();
        else if (type !== 'DELETED') this.considerAll(`system:node:${node!.metadata.name}`);
      },
      onError,
    );
  }

  async start(): Promise<void> {
    this.running = true;
    this.csrs.start();
    this.nodes.start();
  }

  /** How many CSRs this approver has approved or denied since it started. */
  get decidedCount(): number {
    return this.decisions;
  }

  private considerAll(requester?: string): void {
    for (const csr of this.csrs.store.values()) {
      if (!requester || csr.spec.username === requester) this.consider(csr.metadata.name);
    }
  }

  private consider(name: string): void {
    this.queue = this.queue
      .then(() => this.decide(name))
      .catch((err: Error) => {
        this.lastError = err.message;
        // The approval call failed (API down, conflict): look again shortly, the watch may stay quiet.
        if (this.running)
          setTimeout(() => {
            if (this.running) this.consider(name);
          }, RETRY_MS).unref();
      });
  }

  private async decide(name: string): Promise<void> {
    const csr = this.csrs.store.get(name);
    if (!this.running || !csr || csr.status?.conditions?.length || this.decided.has(name)) return;
    if (!this.nodes.hasSynced) return; // judged again once Nodes are listed
    const nodeName = /^system:node:(.+)$/.exec(csr.spec.username)?.[1];
    const n0 = nodeName ? this.nodes.get(nodeName) : undefined;
    const verdict = judgeServingCsr(csr, n0 ? { name: n0.metadata.name, addresses: n0.status?.addresses ?? [] } : undefined);
    if (!verdict) return;
    const condition = verdict.approve
      ? { type: 'Approved', status: 'True', reason: 'KctlServingCertApproved', message: verdict.reason }
      : { type: 'Denied', status: 'True', reason: 'KctlServingCertDenied', message: verdict.reason };
    await this.kube.request(
      'PUT',
      resourcePath({ apiVersion: 'certificates.k8s.io/v1', resource: 'certificatesigningrequests', name, subresource: 'approval' }),
      { ...csr, status: { ...(csr.status ?? {}), conditions: [condition] } },
    );
    this.decided.add(name);
    this.log[verdict.approve ? 'info' : 'warn'](
      { csr: name, requester: csr.spec.username },
      `${verdict.approve ? 'approved' : 'denied'} kubelet serving CSR: ${verdict.reason}`,
    );
    this.decisions += 1;
    this.lastError = undefined;
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all([this.csrs.stop(), this.nodes.stop()]);
    await this.queue;
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.lastError };
  }
}
