// In-process approver for the CSRs that decide who a node is:
// - kubelet serving certificates (signer kubernetes.io/kubelet-serving): a node may ask only for
//   names and addresses it owns (base/ownership.ts unownedBy: the ownership rule agents'
//   claims follow too), or IPs other nodes report too (routed to nobody, so harmless in a certificate);
// - kubelet client certificates asked with a worker token (signer
//   kubernetes.io/kube-apiserver-client-kubelet, requester system:bootstrap:<id>): a token mints
//   only a node name that is not registered (or the one it was made for), within its uses.
// kube-controller-manager still approves a node's renewal of its own client certificate.
// Anything else of these two signers is denied, with the reason in the CSR's condition.
import type { Logger } from '../../base/log.ts';
import { unownedBy, type NodeDirectory } from '../../base/ownership.ts';
import { resourcePath, type KubeClient } from '../../kube/client.ts';
import { Informer, type ListWatchOptions } from '../../kube/informer.ts';
import type { Component, ComponentContext, ComponentStatus } from '../../base/component.ts';
import { parseCsr, type CsrContents } from './csr-request.ts';
import type { NodeWatchComponent } from '../nodes/nodes.ts';
import { NODE_NAME, tokenRefusal, WorkerTokenStore, type WorkerTokenRecord } from './worker-tokens.ts';
import { asError } from '../../base/errors.ts';

export interface Csr {
  metadata: { name: string };
  spec: { request: string; signerName: string; username: string; groups?: string[]; usages?: string[] };
  status?: { conditions?: { type: string }[] };
}

export const SERVING_SIGNER = 'kubernetes.io/kubelet-serving';
export const KUBELET_CLIENT_SIGNER = 'kubernetes.io/kube-apiserver-client-kubelet';

const SERVING_USAGES = new Set(['digital signature', 'key encipherment', 'server auth']);
const CLIENT_USAGES = new Set(['digital signature', 'key encipherment', 'client auth']);
const BOOTSTRAP_USER = /^system:bootstrap:([a-z0-9]{6})$/;

export type Verdict = { approve: true; reason: string } | { approve: false; reason: string } | null;

const deny = (reason: string): Verdict => ({ approve: false, reason });

const NODE_USER = /^system:node:(.+)$/;
/** Each CSR object's request, parsed once: the approver asks again for every decision (issuedTo). */
const parsedRequests = new WeakMap<Csr, CsrContents | Error>();

function requestOf(csr: Csr): CsrContents | Error {
  let req = parsedRequests.get(csr);
  if (req === undefined) {
    try {
      req = parseCsr(Buffer.from(csr.spec.request, 'base64').toString('utf8'));
    } catch (err) {
      req = asError(err);
    }
    parsedRequests.set(csr, req);
  }
  return req;
}

/** The request of a node certificate CSR, or why it is not one (subject, usages). */
function nodeRequest(
  csr: Csr,
  usagesAllowed: Set<string>,
  usage: string,
): { req: CsrContents; nodeName: string } | string {
  const req = requestOf(csr);
  if (req instanceof Error) return `request does not parse: ${req.message}`;
  const nodeName = NODE_USER.exec(req.commonName)?.[1];
  if (nodeName === undefined || !NODE_NAME.test(nodeName) || nodeName.length > 253)
    return `subject CN ${req.commonName} is not system:node:<a valid node name>`;
  if (req.organizations.length !== 1 || req.organizations[0] !== 'system:nodes')
    return 'subject O must be exactly system:nodes';
  const usages = csr.spec.usages ?? [];
  if (!usages.includes(usage) || usages.some((u) => !usagesAllowed.has(u)))
    return `usages ${usages.join(',')} are not a node ${usage} certificate's`;
  return { req, nodeName };
}

/** Decide on one serving CSR; null means "not ours or not decidable yet" (e.g. the Node is not registered). */
export function judgeServingCsr(csr: Csr, nodes: NodeDirectory): Verdict {
  if (csr.spec.signerName !== SERVING_SIGNER) return null;
  const m = NODE_USER.exec(csr.spec.username);
  if (!m || !(csr.spec.groups ?? []).includes('system:nodes'))
    return deny(`requester ${csr.spec.username} is not a node`);
  const requester = m[1]!;
  const parsed = nodeRequest(csr, SERVING_USAGES, 'server auth');
  if (typeof parsed === 'string') return deny(parsed);
  const { req, nodeName } = parsed;
  if (nodeName !== requester) return deny(`subject CN ${req.commonName} is not the requesting node`);
  if (req.otherNames > 0) return deny('only DNS and IP subject alternative names are allowed');
  if (req.dnsNames.length + req.ipAddresses.length === 0) return deny('no subject alternative names');
  const node = nodes.get(nodeName);
  if (!node) return null; // not registered yet: decide once the Node exists
  // An IP the node shares with others (two sites, one private range) may be in its certificate: nothing is routed to it.
  const problems = unownedBy(nodeName, node, req.dnsNames, req.ipAddresses, nodes, 'each');
  if (problems.length)
    return deny(`names not owned by node ${nodeName}: ${problems.map((p) => `${p.value} (${p.reason})`).join(', ')}`);
  return {
    approve: true,
    reason: `serving certificate for node ${nodeName} (${[...req.dnsNames, ...req.ipAddresses].join(', ')})`,
  };
}

/** What a bootstrap CSR is judged against besides the request itself. */
export interface BootstrapContext {
  nodes: NodeDirectory;
  /** The requesting token's record; undefined when the token is gone (invalidated, used up, expired). */
  token: WorkerTokenRecord | undefined;
  /** Token ids whose bootstrap CSR for this node name was approved already. */
  issuedTo: (nodeName: string) => string[];
}

/** The node name a CSR's subject asks for (CN=system:node:<name>), or undefined. */
function nodeNameOf(csr: Csr): string | undefined {
  const req = requestOf(csr);
  return req instanceof Error ? undefined : NODE_USER.exec(req.commonName)?.[1];
}

/** The token id of a bootstrap requester, or undefined when the CSR is not a worker token's. */
export function bootstrapTokenId(csr: Csr): string | undefined {
  if (csr.spec.signerName !== KUBELET_CLIENT_SIGNER) return undefined;
  return BOOTSTRAP_USER.exec(csr.spec.username)?.[1];
}

/** Decide on a kubelet client CSR asked with a bootstrap token; null for any other CSR (renewals are kube-controller-manager's). */
export function judgeBootstrapCsr(csr: Csr, ctx: BootstrapContext): Verdict {
  const id = bootstrapTokenId(csr);
  if (id === undefined) return null;
  if (!(csr.spec.groups ?? []).includes('system:bootstrappers'))
    return deny(`requester ${csr.spec.username} is not in group system:bootstrappers`);
  const parsed = nodeRequest(csr, CLIENT_USAGES, 'client auth');
  if (typeof parsed === 'string') return deny(parsed);
  const { req, nodeName } = parsed;
  if (req.dnsNames.length + req.ipAddresses.length + req.otherNames > 0)
    return deny('a node client certificate carries no subject alternative names');
  if (!ctx.token) return deny(`token ${id} no longer exists (invalidated, expired or used up)`);
  const refusal = tokenRefusal(ctx.token, nodeName);
  if (refusal) return deny(refusal);
  const rejoin = ctx.token.nodeName === nodeName;
  if (!rejoin && ctx.nodes.get(nodeName))
    return deny(
      `node ${nodeName} is already registered; a worker token cannot take a registered name (to re-join that host: kctl token create --role worker --node-name ${nodeName})`,
    );
  const others = ctx.issuedTo(nodeName).filter((t) => t !== id);
  if (!rejoin && others.length > 0)
    return deny(
      `a client certificate for node ${nodeName} was already issued to a join with token ${others.join(', ')}`,
    );
  return { approve: true, reason: `node ${nodeName} joins with token ${id}${rejoin ? ' (made for this node)' : ''}` };
}

const CSRS = '/apis/certificates.k8s.io/v1/certificatesigningrequests';
const RETRY_MS = 2000;

/**
 * Watches CSRs and Nodes (list + watch, no polling): a CSR is judged when it
 * arrives, and again when its Node appears or changes addresses. One decision at a time.
 */
export class CsrApproverComponent implements Component {
  readonly name = 'csr-approver';
  private log!: Logger;
  private readonly csrs: Informer<Csr>;
  private running = false;
  private queue: Promise<void> = Promise.resolve();
  /** Decided here but maybe not yet seen back through the watch: never judged twice. */
  private readonly decided = new Set<string>();
  private decisions = 0;
  private lastError: string | undefined;

  private unwatchNodes: (() => void) | undefined;
  private readonly tokens: WorkerTokenStore;

  constructor(
    private readonly kube: KubeClient,
    private readonly nodes: NodeWatchComponent,
    watch: ListWatchOptions = {},
  ) {
    const onError = (err: Error) => {
      this.lastError = err.message;
    };
    this.tokens = new WorkerTokenStore(kube);
    this.csrs = new Informer<Csr>(
      kube,
      CSRS,
      watch, // both signers (a field selector takes one); other CSRs are few and ignored
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

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    this.running = true;
    this.csrs.start();
    // A CSR whose Node was not registered (or lacked the address) is judged again when it changes.
    this.unwatchNodes = this.nodes.onChange((node) =>
      this.considerAll(node === undefined ? undefined : `system:node:${node}`),
    );
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
    const tokenId = bootstrapTokenId(csr);
    const kind = tokenId === undefined ? 'kubelet serving' : 'node join';
    let token: Awaited<ReturnType<WorkerTokenStore['read']>>;
    if (tokenId !== undefined) token = await this.tokens.read(tokenId);
    const verdict =
      tokenId === undefined
        ? judgeServingCsr(csr, this.nodes)
        : judgeBootstrapCsr(csr, { nodes: this.nodes, token, issuedTo: (node) => this.issuedTo(node) });
    if (!verdict) return;
    // A join is written on its token before it is approved: a conflict (another join took the
    // last use meanwhile) fails this decision, and the retry reads the token again.
    const joining = verdict.approve && token ? nodeNameOf(csr) : undefined;
    if (token && joining) await this.tokens.recordJoin(token, joining);
    const reason = tokenId === undefined ? 'KctlServingCert' : 'KctlNodeJoin';
    const condition = verdict.approve
      ? { type: 'Approved', status: 'True', reason: `${reason}Approved`, message: verdict.reason }
      : { type: 'Denied', status: 'True', reason: `${reason}Denied`, message: verdict.reason };
    await this.kube.request(
      'PUT',
      resourcePath({
        apiVersion: 'certificates.k8s.io/v1',
        resource: 'certificatesigningrequests',
        name,
        subresource: 'approval',
      }),
      { ...csr, status: { ...(csr.status ?? {}), conditions: [condition] } },
    );
    this.decided.add(name);
    this.log[verdict.approve ? 'info' : 'warn'](
      { csr: name, requester: csr.spec.username },
      `${verdict.approve ? 'approved' : 'denied'} ${kind} CSR: ${verdict.reason}`,
    );
    this.decisions += 1;
    this.lastError = undefined;
    if (tokenId !== undefined && verdict.approve && (await this.tokens.consumeIfUsedUp(tokenId)))
      this.log.info({ token: tokenId }, `token ${tokenId} is used up and was deleted`);
  }

  /** Token ids whose bootstrap CSR for `node` was approved (CSRs are kept an hour after approval). */
  private issuedTo(node: string): string[] {
    const ids: string[] = [];
    for (const c of this.csrs.store.values()) {
      const id = bootstrapTokenId(c);
      if (id !== undefined && c.status?.conditions?.some((k) => k.type === 'Approved') && nodeNameOf(c) === node)
        ids.push(id);
    }
    return ids;
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
