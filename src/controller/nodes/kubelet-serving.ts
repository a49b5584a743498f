// Which CA each kubelet's serving certificate comes from, seen the way kube-apiserver sees it:
// through the tunnel, in a TLS handshake with the kubelet. An older cluster's kubelets served
// certificates of the cluster CA; kctl now signs them with the kubelet-serving CA and trusts the
// cluster CA for kubelets only while some node still serves one. Once no node does, this writes
// the mark that makes the next controller start drop the cluster CA from the kubelet bundle.
import { X509Certificate } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { connect as tlsConnect } from 'node:tls';
import { joinHostPort } from '../../base/addresses.ts';
import { writeFileAtomic } from '../../base/fs.ts';
import type { Logger } from '../../base/log.ts';
import type { Component, ComponentContext, ComponentStatus } from '../../base/component.ts';
import { dialViaProxy } from '../../konnectivity/index.ts';
import type { PkiPaths } from '../../pki/index.ts';
import type { NodeWatchComponent } from './nodes.ts';
import { messageOf } from '../../base/errors.ts';

const CHECK_EVERY_MS = 60_000;
const FIRST_CHECK_MS = 15_000;
const SOON_AFTER_CHANGE_MS = 5_000;
const MIN_GAP_MS = 10_000;
const HANDSHAKE_TIMEOUT_MS = 10_000;
/** Where a kubelet listens when its Node does not say (status.daemonEndpoints). */
const KUBELET_PORT = 10250;

/** What `kctl status` shows about kubelet serving certificates. */
export interface KubeletServingStatus {
  /** The CAs kube-apiserver trusts for kubelets now. */
  trusted: 'kubelet-serving CA' | 'kubelet-serving CA and cluster CA';
  /** Nodes whose kubelet still serves a certificate of the cluster CA (last check). */
  onClusterCa: string[];
  /** Nodes whose kubelet could not be reached, with why (last check). */
  unchecked: { node: string; error: string }[];
  checkedAt?: string;
}

export type ServingIssuer = 'kubelet-serving CA' | 'cluster CA' | 'another CA';

/** Which of the two CAs signed a certificate (DER or PEM). */
export function servingIssuer(
  cert: X509Certificate,
  servingCa: X509Certificate,
  clusterCa: X509Certificate,
): ServingIssuer {
  const by = (ca: X509Certificate) => cert.checkIssued(ca) && cert.verify(ca.publicKey);
  if (by(servingCa)) return 'kubelet-serving CA';
  return by(clusterCa) ? 'cluster CA' : 'another CA';
}

/** The kubelet's serving certificate at `address` (host:port), fetched through the tunnel. */
async function peerCertificate(udsPath: string, address: string, serverName: string): Promise<X509Certificate> {
  const tunnel = await dialViaProxy({ udsPath, address, signal: AbortSignal.timeout(HANDSHAKE_TIMEOUT_MS) });
  return new Promise((resolve, reject) => {
    // Only the certificate is read: no request is sent, so nothing is trusted yet.
    const tls = tlsConnect({ socket: tunnel, servername: serverName, rejectUnauthorized: false });
    const timer = setTimeout(
      () => tls.destroy(new Error(`no TLS handshake within ${HANDSHAKE_TIMEOUT_MS} ms`)),
      HANDSHAKE_TIMEOUT_MS,
    );
    tls.once('secureConnect', () => {
      clearTimeout(timer);
      const raw = tls.getPeerCertificate().raw;
      tls.destroy();
      if (!raw) return reject(new Error('the kubelet presented no certificate'));
      resolve(new X509Certificate(raw));
    });
    tls.once('error', (err) => {
      clearTimeout(timer);
      tunnel.destroy();
      reject(err);
    });
  });
}

export class KubeletServingCheckComponent implements Component {
  readonly name = 'kubelet-serving-check';
  private log!: Logger;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private last: Omit<KubeletServingStatus, 'trusted'> = { onClusterCa: [], unchecked: [] };
  private lastError: string | undefined;
  /** The bundle as this controller started with it (kube-apiserver read it then). */
  private readonly startedMoved: boolean;

  constructor(
    private readonly pki: PkiPaths,
    private readonly konnectivitySocket: string,
    private readonly nodes: NodeWatchComponent,
  ) {
    this.startedMoved = existsSync(pki.kubeletServingMoved);
  }

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    if (this.startedMoved) return; // nothing left to move: the cluster CA is not trusted for kubelets
    // Every minute, and soon after a Node changes (a worker that restarted has a new certificate).
    this.timer = setInterval(() => this.soon(0), CHECK_EVERY_MS);
    this.timer.unref();
    this.unwatch = this.nodes.onChange(() => this.soon(SOON_AFTER_CHANGE_MS));
    this.soon(FIRST_CHECK_MS);
  }

  private unwatch: () => void = () => {};
  private pending: NodeJS.Timeout | undefined;
  private lastCheck = 0;

  /** One check in `delayMs` (at least MIN_GAP_MS after the last), unless one is already due. */
  private soon(delayMs: number): void {
    if (this.pending) return;
    const wait = Math.max(delayMs, this.lastCheck + MIN_GAP_MS - Date.now());
    this.pending = setTimeout(() => {
      this.pending = undefined;
      this.lastCheck = Date.now();
      this.running ??= this.check()
        .catch((err: Error) => void (this.lastError = err.message))
        .finally(() => (this.running = undefined));
    }, wait);
    this.pending.unref();
  }

  /** Looks at every Node's kubelet once; writes the mark when none serves a cluster-CA certificate. */
  async check(): Promise<void> {
    if (!this.nodes.synced) return;
    const [servingCa, clusterCa] = await Promise.all(
      [this.pki.kubeletServingCaCert, this.pki.caCert].map(async (f) => new X509Certificate(await readFile(f))),
    );
    const onClusterCa: string[] = [];
    const unchecked: { node: string; error: string }[] = [];
    for (const name of this.nodes.names()) {
      const node = this.nodes.get(name);
      if (!node) continue; // deleted since the list
      // By name, as kube-apiserver dials it: the tunnel takes it to the agent of that node.
      const address = joinHostPort(name, node.kubeletPort ?? KUBELET_PORT);
      try {
        const issuer = servingIssuer(
          await peerCertificate(this.konnectivitySocket, address, name),
          servingCa!,
          clusterCa!,
        );
        if (issuer === 'cluster CA') onClusterCa.push(name);
        else if (issuer === 'another CA')
          unchecked.push({ node: name, error: 'its serving certificate is from neither CA' });
      } catch (err) {
        unchecked.push({ node: name, error: messageOf(err) });
      }
    }
    this.last = { onClusterCa, unchecked, checkedAt: new Date().toISOString() };
    this.lastError = undefined;
    if (onClusterCa.length === 0 && unchecked.length === 0 && !existsSync(this.pki.kubeletServingMoved)) {
      await writeFileAtomic(
        this.pki.kubeletServingMoved,
        `every node served a kubelet-serving CA certificate at ${this.last.checkedAt}\n`,
        0o644,
      );
      this.log.info(
        { nodes: this.nodes.size },
        'every kubelet serves a certificate of the kubelet-serving CA: the next controller start stops trusting the cluster CA for kubelets',
      );
    } else if (onClusterCa.length > 0) {
      this.log.info(
        { nodes: onClusterCa },
        `${onClusterCa.length} kubelet(s) still serve a certificate of the cluster CA (a kctl worker restart replaces it)`,
      );
    }
  }

  report(): KubeletServingStatus {
    return { trusted: this.startedMoved ? 'kubelet-serving CA' : 'kubelet-serving CA and cluster CA', ...this.last };
  }

  async stop(): Promise<void> {
    this.unwatch();
    clearTimeout(this.pending);
    clearInterval(this.timer);
    await this.running;
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.lastError };
  }
}
