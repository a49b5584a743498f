// Counting konnectivity servers by their leases (upstream proxy-agent's --count-server-leases):
// every server renews a Lease in one namespace with a known label; the agent holds as many server
// connections as there are valid leases. A lease is valid while its renew (or acquire) time plus
// its duration lies ahead. With no valid lease, or before the first list, the count is 1.
import { readFileSync } from 'node:fs';
import type { KubeClient, KubeCredentials } from './client.ts';
import { Informer, type ListWatchOptions } from './informer.ts';

export interface ServerLease {
  metadata: { name: string; namespace?: string; resourceVersion?: string };
  spec?: { renewTime?: string; acquireTime?: string; leaseDurationSeconds?: number };
}

/** Valid: renewed (or, never renewed, acquired) less than its duration ago. */
export function leaseIsValid(lease: ServerLease, now = Date.now()): boolean {
  const at = lease.spec?.renewTime ?? lease.spec?.acquireTime;
  if (!at) return false;
  return Date.parse(at) + (lease.spec?.leaseDurationSeconds ?? 0) * 1000 > now;
}

export class ServerLeaseCounter {
  private readonly informer: Informer<ServerLease>;
  private last = 1;

  constructor(kube: KubeClient, namespace: string, labelSelector: string, observe?: ListWatchOptions['observe'], onError?: (err: Error) => void) {
    const path = `/apis/coordination.k8s.io/v1/namespaces/${encodeURIComponent(namespace)}/leases`;
    this.informer = new Informer<ServerLease>(kube, path, { labelSelector, observe }, () => undefined, onError);
  }

  start(): void {
    this.informer.start();
  }

  stop(): Promise<void> {
    return this.informer.stop();
  }

  get synced(): boolean {
    return this.informer.hasSynced;
  }

  /** The valid leases now; 1 when there are none. */
  count(now = Date.now()): number {
    if (!this.informer.hasSynced) return this.last;
    let n = 0;
    for (const l of this.informer.store.values()) if (leaseIsValid(l, now)) n++;
    this.last = Math.max(1, n);
    return this.last;
  }
}

const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/**
 * The credentials of a pod's service account (client-go's InClusterConfig): the API address from
 * KUBERNETES_SERVICE_HOST/PORT, the token (re-read on every connection: it rotates) and the CA.
 */
export function inClusterCredentials(env = process.env): () => KubeCredentials {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!host || !port) throw new Error('not running in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset); pass --kubeconfig');
  const ca = readFileSync(`${SA_DIR}/ca.crt`);
  const server = `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
  return () => ({ server, ca, token: readFileSync(`${SA_DIR}/token`, 'utf8').trim() });
}
