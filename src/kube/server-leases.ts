// Counting konnectivity servers by their leases (upstream proxy-agent's --count-server-leases):
// every server renews a Lease in one namespace with a known label; the agent holds as many server
// connections as there are valid leases. A lease is valid while its renew (or acquire) time plus
// its duration lies ahead. With no valid lease, or before the first list, the count is 1.
import { readFileSync } from 'node:fs';
import type { KubeClient, KubeCredentials } from './client.ts';
import { microTime } from './controller-leases.ts';
import { Informer, type ListWatchOptions } from './informer.ts';
import { resourcePath } from './paths.ts';

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

/** A namespace's Leases, or one of them by name. */
const leasePath = (namespace: string, name?: string): string =>
  resourcePath({ apiVersion: 'coordination.k8s.io/v1', resource: 'leases', namespace, name });

export class ServerLeaseCounter {
  private readonly informer: Informer<ServerLease>;
  private last = 1;

  constructor(
    kube: KubeClient,
    namespace: string,
    labelSelector: string,
    observe?: ListWatchOptions['observe'],
    onError?: (err: Error) => void,
  ) {
    this.informer = new Informer<ServerLease>(
      kube,
      leasePath(namespace),
      { labelSelector, observe },
      () => undefined,
      onError,
    );
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
  if (!host || !port)
    throw new Error(
      'not running in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset); pass --kubeconfig',
    );
  const ca = readFileSync(`${SA_DIR}/ca.crt`);
  const server = `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
  return () => ({ server, ca, token: readFileSync(`${SA_DIR}/token`, 'utf8').trim() });
}

/** `k=v,k2=v2` as upstream's --lease-label takes it; a one-line error for anything else. */
export function parseLeaseLabels(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of text.split(',')) {
    const kv = pair.split('=');
    if (kv.length !== 2 || !kv[0]!.trim()) throw new Error(`lease label "${pair}" is not key=value`);
    out[kv[0]!.trim()] = kv[1]!.trim();
  }
  return out;
}

/** What happened to each list and delete call (the server's lease metrics). */
export interface LeaseCallObserver {
  list(code: number, reason: string, seconds: number): void;
  delete(code: number, reason: string, seconds: number): void;
  culled(): void;
}

export interface ServerLeasePublisherOptions {
  serverId: string;
  namespace: string;
  labels: Record<string, string>;
  /** Upstream's: valid 30 s, renewed every 15 s, expired leases collected every 15 s. */
  durationSeconds?: number;
  renewMs?: number;
  gcMs?: number;
  observe?: LeaseCallObserver;
  onError?: (err: Error) => void;
}

async function timed(
  call: () => Promise<unknown>,
  report: (code: number, reason: string, seconds: number) => void,
): Promise<void> {
  const t0 = process.hrtime.bigint();
  const seconds = () => Number(process.hrtime.bigint() - t0) / 1e9;
  try {
    await call();
    report(200, '', seconds());
  } catch (err) {
    const e = err as { status?: number; reason?: string };
    report(e.status ?? 0, e.reason ?? 'Unknown', seconds());
    throw err;
  }
}

/**
 * A konnectivity server's presence, as upstream's proxy-server --enable-lease-controller keeps it:
 * a Lease `konnectivity-proxy-server-<id>` with the given labels, renewed while the server runs
 * and deleted when it stops; expired leases of other servers with those labels are deleted, so
 * agents that count leases (--count-server-leases) count live servers.
 */
export class ServerLeasePublisher {
  readonly leaseName: string;
  private timers: NodeJS.Timeout[] = [];

  constructor(
    private readonly kube: KubeClient,
    private readonly o: ServerLeasePublisherOptions,
  ) {
    this.leaseName = `konnectivity-proxy-server-${o.serverId}`;
  }

  start(): void {
    const run = (what: () => Promise<void>) => () => void what().catch((err: Error) => this.o.onError?.(err));
    run(() => this.renew())();
    this.timers.push(
      setInterval(
        run(() => this.renew()),
        this.o.renewMs ?? 15_000,
      ),
    );
    this.timers.push(
      setInterval(
        run(() => this.collect()),
        this.o.gcMs ?? 15_000,
      ),
    );
  }

  async renew(): Promise<void> {
    await this.kube.apply(
      {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name: this.leaseName, namespace: this.o.namespace, labels: this.o.labels },
        spec: {
          holderIdentity: this.o.serverId,
          leaseDurationSeconds: this.o.durationSeconds ?? 30,
          renewTime: microTime(new Date()),
        },
      },
      { fieldManager: 'kctl-konnectivity-server' },
    );
  }

  /** Deletes every expired lease with our labels (another server that died without cleaning up). */
  async collect(now = Date.now()): Promise<void> {
    const selector = Object.entries(this.o.labels)
      .map(([k, v]) => `${k}=${v}`)
      .join(',');
    let leases: ServerLease[] = [];
    await timed(
      async () =>
        (leases = (await this.kube.list<ServerLease>(leasePath(this.o.namespace), { labelSelector: selector })).items),
      (code, reason, s) => this.o.observe?.list(code, reason, s),
    );
    for (const l of leases) {
      if (leaseIsValid(l, now)) continue;
      await timed(
        () => this.kube.request('DELETE', leasePath(this.o.namespace, l.metadata.name)),
        (code, reason, s) => this.o.observe?.delete(code, reason, s),
      ).then(
        () => this.o.observe?.culled(),
        (err: Error) => this.o.onError?.(err),
      );
    }
  }

  /** Stops renewing and deletes this server's lease. */
  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    await this.kube.request('DELETE', leasePath(this.o.namespace, this.leaseName));
  }
}
