// In-process approver for kubelet serving certificates (signer kubernetes.io/kubelet-serving).
// kube-controller-manager approves node *client* CSRs itself; serving CSRs need someone to
// check that a node asks only for its own name and addresses (the rule konnectivity agents'
// claims follow too: unownedBy in konnectivity/claims.ts). Anything else is denied.
import type { Logger } from '../base/log.ts';
import { unownedBy, type NodeRecord } from '../konnectivity/claims.ts';
import { resourcePath, type KubeClient } from '../kube/client.ts';
import { Informer, type ListWatchOptions } from '../kube/informer.ts';
import type { Component, ComponentStatus } from '../base/component.ts';
import { parseCsr } from './csr-request.ts';
import type { NodeWatchComponent } from './nodes.ts';

export interface Csr {
  metadata: { name: string };
  spec: { request: string; signerName: string; username: string; groups?: string[]; usages?: string[] };
  status?: { conditions?: { type: string }[] };
}

const ALLOWED_USAGES = new Set(['digital signature', 'key encipherment', 'server auth']);

export type Verdict = { approve: true; reason: string } | { approve: false; reason: string } | null;

/** Decide on one CSR; null means "not ours or not decidable yet" (e.g. the Node is not registered). */
export function judgeServingCsr(csr: Csr, node: NodeRecord | undefined): Verdict {
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
  const unowned = unownedBy(node, req.dnsNames, req.ipAddresses);
  if (unowned.length) return { approve: false, reason: `names not owned by node ${nodeName}: ${unowned.join(', ')}` };
  return { approve: true, reason: `serving certificate for node ${nodeName} (${[...req.dnsNames, ...req.ipAddresses].join(', ')})` };
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
  private running = false;
  private queue: Promise<void> = Promise.resolve();
  /** Decided here but maybe not yet seen back through the watch: never judged twice. */
  private readonly decided = new Set<string>();
  private decisions = 0;
  private lastError: string | undefined;

  private unwatchNodes: (() => void) | undefined;

  constructor(
    private readonly kube: KubeClient,
    private readonly nodes: NodeWatchComponent,
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
  }

  async start(): Promise<void> {
    this.running = true;
    this.csrs.start();
    // A CSR whose Node was not registered (or lacked the address) is judged again when it changes.
    this.unwatchNodes = this.nodes.onChange((node) => this.considerAll(node === undefined ? undefined : `system:node:${node}`));
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
    if (!this.nodes.synced) return; // judged again once Nodes are listed
    const nodeName = /^system:node:(.+)$/.exec(csr.spec.username)?.[1];
    const verdict = judgeServingCsr(csr, nodeName ? this.nodes.get(nodeName) : undefined);
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
    this.unwatchNodes?.();
    await this.csrs.stop();
    await this.queue;
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.lastError };
  }
}
