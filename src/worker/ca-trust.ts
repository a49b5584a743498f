// ca-trust: keeps the node's trust in the cluster CA in step with the controllers, so a CA
// rotation (kctl pki rotate-ca) needs no rejoin. Every 10 s it reads the cluster's trust bundle
// from kube-public/cluster-info with the node's own credentials, and:
//   - a new bundle is taken only if every CA it adds is vouched for by a CA the node trusts now
//     (the rotation's cross-signature, published beside it): whoever can write cluster-info but
//     holds no CA key cannot make nodes trust a CA of theirs. A refusal is one warn line and a
//     Warning event on the Node, and changes nothing;
//   - a new bundle goes to ca.crt (kubelet's client CA and the API balancer's probes reread it),
//     to the kubeconfigs' embedded CA and to the konnectivity agent; kubelet and kube-proxy are
//     restarted once, since they load a kubeconfig's CA when they start (containers keep running);
//   - when the bundle's first certificate (the CA that signs now) did not sign the node's client
//     certificate, the node asks for a new one with a CSR of its own (the same request kubelet
//     makes to renew; kube-controller-manager signs it) and kubelet is restarted onto it.
// Then it names the bundle it uses on its Node (kctl.dev/ca-bundle): what the rotation waits for.
import { existsSync } from 'node:fs';
import { readdir, readFile, rename, rm, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Component, ComponentContext, ComponentStatus, Restartable } from '../base/component.ts';
import { messageOf } from '../base/errors.ts';
import { writeFileAtomic } from '../base/fs.ts';
import type { Logger } from '../base/log.ts';
import type { KubeClient } from '../kube/client.ts';
import { nodePath } from '../kube/nodes.ts';
import { CA_BUNDLE_ANNOTATION } from '../kube/controller-leases.ts';
import {
  bundleHash,
  bundleOf,
  certificateRequestPem,
  generateKeyPem,
  parseKey,
  readKubeconfig,
  signedByFirst,
  splitCertificates,
  unvouched,
} from '../pki/index.ts';
import { warningEvent } from '../kube/events.ts';
import { CA_PROOF_KEY, CLUSTER_INFO_PATH as CLUSTER_INFO } from '../kube/cluster-info.ts';
import { setKubeconfigsCa } from './join.ts';
import type { WorkerPaths } from './paths.ts';

const CHECK_EVERY_MS = 10_000;
const CSR_WAIT_MS = 60_000;
const CSRS = '/apis/certificates.k8s.io/v1/certificatesigningrequests';
const KUBELET_CLIENT_SIGNER = 'kubernetes.io/kube-apiserver-client-kubelet';

export interface CaTrustOptions {
  paths: WorkerPaths;
  kube: KubeClient;
  nodeName: string;
  /** Restarted after the trust or the client certificate changed, kubelet first. */
  restart: Restartable[];
  /** The konnectivity agent: new connections verify the controllers with the new bundle. */
  agent: { trustChanged(caPem: string): void };
}

interface Csr {
  metadata: { name: string };
  status?: { certificate?: string; conditions?: { type: string; message?: string }[] };
}

export class CaTrustComponent implements Component {
  readonly name = 'ca-trust';
  private log!: Logger;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> = Promise.resolve();
  private readonly abort = new AbortController();
  private lastError: string | undefined;
  private published: string | undefined;
  /** The last refusal of cluster-info's bundle, said once. */
  private refused: string | undefined;
  /** Why kubelet and kube-proxy must restart; kept until they did, so a failed restart is tried again. */
  private restartsDue: string[] = [];

  constructor(private readonly o: CaTrustOptions) {}

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    const tick = () => {
      this.running = this.check()
        .then(
          () => (this.lastError = undefined),
          (err: unknown) => {
            if (this.abort.signal.aborted) return;
            const error = `cannot follow the cluster CA: ${messageOf(err)}`;
            if (error !== this.lastError && this.refused === undefined) this.log.warn(error); // a refusal said its own line
            this.lastError = error;
          },
        )
        .finally(() => {
          if (!this.abort.signal.aborted) this.timer = setTimeout(tick, CHECK_EVERY_MS);
        });
    };
    tick();
  }

  async stop(): Promise<void> {
    this.abort.abort();
    clearTimeout(this.timer);
    await this.running;
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.lastError };
  }

  private clientCertFile(): string {
    return this.o.paths.kubeletClientPem;
  }

  private async check(): Promise<void> {
    // Before kubelet's TLS bootstrap the node has no credentials of its own yet.
    if (!existsSync(this.o.paths.kubeletKubeconfig)) return;
    const published = await this.clusterBundle();
    if (!published) return;
    const { bundle, proofs } = published;
    const { paths } = this.o;
    const trusted = bundleOf(splitCertificates(await readFile(paths.caCert, 'utf8')));
    if (trusted !== bundle) {
      const missing = unvouched(bundle, trusted, proofs);
      if (missing.length > 0) {
        const why = `the cluster CA bundle in cluster-info adds ${missing.join('; ')}, which no CA this node trusts vouches for; the node keeps trusting what it does`;
        if (why !== this.refused) {
          this.log.warn(why);
          await warningEvent(
            this.o.kube,
            { kind: 'Node', name: this.o.nodeName },
            'CaBundleRefused',
            why,
            'kctl-worker',
          ).catch(() => undefined);
        }
        this.refused = why;
        throw new Error(why);
      }
      this.refused = undefined;
      await writeFileAtomic(paths.caCert, bundle, 0o644);
      await setKubeconfigsCa(paths, bundle);
      this.o.agent.trustChanged(bundle);
      this.log.info(
        { cas: splitCertificates(bundle).length },
        'the cluster CA bundle changed: the node trusts the new one',
      );
      this.restartsDue.push('the cluster CA bundle changed');
    }
    const client = await readFile(this.clientCertFile(), 'utf8').catch(() => null);
    // No client certificate yet: kubelet's own bootstrap gets one from the CA that signs now.
    if (client !== null && !signedByFirst(client, bundle)) {
      await this.renewClientCertificate(bundle);
      this.restartsDue.push('the node client certificate was reissued by the new CA');
    }
    if (this.restartsDue.length) {
      await this.restartAll(this.restartsDue.join('; '));
      this.restartsDue = [];
    }
    const hash = bundleHash(bundle);
    if (this.published !== hash) {
      await this.o.kube.request('PATCH', nodePath(this.o.nodeName), {
        metadata: { annotations: { [CA_BUNDLE_ANNOTATION]: hash } },
      });
      this.published = hash;
    }
  }

  /** The CA bundle in cluster-info, normalized; null when it names none. */
  /** The bundle cluster-info publishes, and the cross-signature published beside it. */
  private async clusterBundle(): Promise<{ bundle: string; proofs: string[] } | null> {
    const cm = await this.o.kube.get<{ data?: Record<string, string> }>(CLUSTER_INFO, this.abort.signal);
    const certs = splitCertificates(readKubeconfig(cm.data?.kubeconfig ?? '', CLUSTER_INFO).caPem ?? '');
    const proof = cm.data?.[CA_PROOF_KEY];
    return certs.length ? { bundle: bundleOf(certs), proofs: proof ? [proof] : [] } : null;
  }

  /** A new client certificate from the CA that signs now, asked with the node's current one; kubelet's file layout. */
  private async renewClientCertificate(bundle: string): Promise<void> {
    const keyPem = await generateKeyPem();
    const request = certificateRequestPem(
      { commonName: `system:node:${this.o.nodeName}`, organizations: ['system:nodes'] },
      parseKey(keyPem, 'new node client key', 'report a bug'),
    );
    const created = await this.o.kube.request<Csr>('POST', CSRS, {
      apiVersion: 'certificates.k8s.io/v1',
      kind: 'CertificateSigningRequest',
      metadata: { generateName: 'csr-kctl-ca-rotation-' },
      spec: {
        request: Buffer.from(request).toString('base64'),
        signerName: KUBELET_CLIENT_SIGNER,
        usages: ['digital signature', 'client auth'],
      },
    });
    const deadline = Date.now() + CSR_WAIT_MS;
    let cert: string | undefined;
    while (!cert) {
      const csr = await this.o.kube.get<Csr>(`${CSRS}/${created.metadata.name}`, this.abort.signal);
      const refused = csr.status?.conditions?.find((c) => c.type === 'Denied' || c.type === 'Failed');
      if (refused)
        throw new Error(
          `CSR ${created.metadata.name} was ${refused.type.toLowerCase()}: ${refused.message ?? 'no reason given'}`,
        );
      if (csr.status?.certificate) cert = Buffer.from(csr.status.certificate, 'base64').toString('utf8');
      else if (Date.now() > deadline)
        throw new Error(`CSR ${created.metadata.name} was not signed within ${CSR_WAIT_MS / 1000} s`);
      else await sleep(1000, undefined, { signal: this.abort.signal });
    }
    // Not yet the new CA's (kube-controller-manager still on the old one): asked again at the next check.
    if (!signedByFirst(cert, bundle))
      throw new Error(
        `CSR ${created.metadata.name} was signed by another CA than the one that signs now; asking again`,
      );
    const stamp = new Date().toISOString().replace(/T/, '-').replace(/[:]/g, '-').slice(0, 19);
    const file = join(this.o.paths.kubeletCertDir, `kubelet-client-${stamp}.pem`);
    await writeFileAtomic(file, `${cert.trim()}\n${keyPem.trim()}\n`, 0o600);
    const link = `${this.clientCertFile()}.kctl-new`;
    await rm(link, { force: true });
    await symlink(file, link);
    await rename(link, this.clientCertFile());
    // Earlier client certificates (kubelet keeps them) were signed by a CA on its way out: gone with it.
    const dir = this.o.paths.kubeletCertDir;
    for (const name of await readdir(dir)) {
      if (/^kubelet-client-\d{4}-.*\.pem$/.test(name) && join(dir, name) !== file)
        await rm(join(dir, name), { force: true });
    }
    this.log.info(
      { csr: created.metadata.name, file },
      'the node client certificate was reissued by the cluster CA that signs now',
    );
  }

  private async restartAll(reason: string): Promise<void> {
    for (const c of this.o.restart) {
      await c.restart(reason);
      await c.ready(AbortSignal.any([this.abort.signal, AbortSignal.timeout(180_000)]));
    }
  }
}
