// In-process approver for kubelet serving certificates (signer kubernetes.io/kubelet-serving).
// kube-controller-manager approves node *client* CSRs itself; serving CSRs need someone to
// check that a node asks only for its own name and addresses. Anything else is denied.
import { isIPv6 } from 'node:net';
import type { Logger } from '../base/log.ts';
import type { KubeClient } from '../kube/client.ts';
import type { Component, ComponentStatus } from '../base/component.ts';
import { parseCsr } from './csr-request.ts';

export interface Csr {
  metadata: { name: string };
  spec: { request: string; signerName: string; username: string; groups?: string[]; usages?: string[] };
  status?: { conditions?: { type: string }[] };
}

export interface NodeAddresses { name: string; addresses: { type: string; address: string }[] }

const ALLOWED_USAGES = new Set(['digital signature', 'key encipherment', 'server auth']);

function canonicalIp(ip: string): string {
  return isIPv6(ip) ? new URL(`http://[${ip}]`).hostname.slice(1, -1) : ip;
}

export type Verdict = { approve: true; reason: string } | { approve: false; reason: string } | null;

/** Decide on one CSR; null means "not ours or not decidable yet" (e.g. the Node is not registered). */
export function judgeServingCsr(csr: Csr, node: NodeAddresses | undefined): Verdict {
  if (csr.spec.signerName !== 'kubernetes.io/kubelet-serving') return null;
  const m = /^system:node:(.+)$/.exec(csr.spec.username);
  if (!m || !(csr.spec.groups ?? []).includes('system:nodes')) return { approve: false, reason: `requester ${csr.spec.username} is not a node` };
  const nodeName = m[1]!;
  let req;
  try { req = parseCsr(Buffer.from(csr.spec.request, 'base64').toString('utf8')); } catch (err) { return { approve: false, reason: `request does not parse: ${(err as Error).message}` }; }
  if (req.commonName !== `system:node:${nodeName}`) return { approve: false, reason: `subject CN ${req.commonName} is not the requesting node` };
  if (req.organizations.length !== 1 || req.organizations[0] !== 'system:nodes') return { approve: false, reason: 'subject O must be exactly system:nodes' };
  const usages = csr.spec.usages ?? [];
  if (!usages.includes('server auth') || usages.some((u) => !ALLOWED_USAGES.has(u))) return { approve: false, reason: `usages ${usages.join(',')} are not a serving certificate's` };
  if (req.otherNames > 0) return { approve: false, reason: 'only DNS and IP subject alternative names are allowed' };
  if (req.dnsNames.length + req.ipAddresses.length === 0) return { approve: false, reason: 'no subject alternative names' };
  if (!node) return null; // not registered yet: decide once the Node exists
  const dnsAllowed = new Set([nodeName, ...node.addresses.filter((a) => /DNS|Hostname/.test(a.type)).map((a) => a.address)]);
  const ipAllowed = new Set(node.addresses.filter((a) => /IP$/.test(a.type)).map((a) => canonicalIp(a.address)));
  const badDns = req.dnsNames.filter((d) => !dnsAllowed.has(d));
  const badIp = req.ipAddresses.map(canonicalIp).filter((ip) => !ipAllowed.has(ip));
  if (badDns.length || badIp.length) return { approve: false, reason: `names not owned by node ${nodeName}: ${[...badDns, ...badIp].join(', ')}` };
  return { approve: true, reason: `serving certificate for node ${nodeName} (${[...req.dnsNames, ...req.ipAddresses].join(', ')})` };
}

export class CsrApproverComponent implements Component {
  readonly name = 'csr-approver';
  private timer: NodeJS.Timeout | null = null;
  private running = false;
  private decided = 0;
  private lastError: string | undefined;
  private startedAt = 0;

  constructor(private readonly kube: () => KubeClient, private readonly log: Logger, private readonly intervalMs = 2000) {}

  async init(): Promise<void> {}

  async start(): Promise<void> {
    this.running = true;
    this.startedAt = Date.now();
    const loop = async () => {
      if (!this.running) return;
      await this.pass().catch((err: Error) => { this.lastError = err.message; });
      if (this.running) this.timer = setTimeout(() => void loop(), this.intervalMs);
    };
    void loop();
  }

  async ready(): Promise<void> {}

  /** One look at pending CSRs; returns how many were decided. */
  async pass(): Promise<number> {
    const kube = this.kube();
    const list = await kube.get<{ items: Csr[] }>('/apis/certificates.k8s.io/v1/certificatesigningrequests?fieldSelector=spec.signerName%3Dkubernetes.io%2Fkubelet-serving');
    let n = 0;
    for (const csr of list.items) {
      if (csr.status?.conditions?.length) continue;
      const nodeName = /^system:node:(.+)$/.exec(csr.spec.username)?.[1];
      const node = nodeName ? await kube.get<{ metadata: { name: string }; status?: { addresses?: NodeAddresses['addresses'] } }>(`/api/v1/nodes/${encodeURIComponent(nodeName)}`)
        .then((n0) => ({ name: n0.metadata.name, addresses: n0.status?.addresses ?? [] }))
        .catch(() => undefined) : undefined;
      const verdict = judgeServingCsr(csr, node);
      if (!verdict) continue;
      const condition = verdict.approve
        ? { type: 'Approved', status: 'True', reason: 'KctlServingCertApproved', message: verdict.reason }
        : { type: 'Denied', status: 'True', reason: 'KctlServingCertDenied', message: verdict.reason };
      await kube.request('PUT', `/apis/certificates.k8s.io/v1/certificatesigningrequests/${csr.metadata.name}/approval`, { ...csr, status: { ...(csr.status ?? {}), conditions: [condition] } });
      this.log[verdict.approve ? 'info' : 'warn']({ csr: csr.metadata.name, requester: csr.spec.username }, `${verdict.approve ? 'approved' : 'denied'} kubelet serving CSR: ${verdict.reason}`);
      this.decided += 1;
      n += 1;
    }
    this.lastError = undefined;
    return n;
  }

  async stop(): Promise<void> {
    this.running = false;
    if (this.timer) clearTimeout(this.timer);
  }

  status(): ComponentStatus {
    return { name: this.name, state: this.running ? 'running' : 'stopped', restarts: 0, lastError: this.lastError, uptimeSeconds: this.running ? Math.round((Date.now() - this.startedAt) / 1000) : undefined };
  }
}
