// Which controllers are alive, for both roles: every kctl controller holds a Lease in
// kube-system (label kctl.dev/controller=true) that names its API server URL and its
// konnectivity agent address, and renews it every 10 s (valid 30 s); it deletes it when it
// stops. Controllers count the live leases as their konnectivity server count; agents dial
// every live controller's konnectivity address. No load balancer, no static count in a file.
import type { KubeClient, KubeManifest } from './client.ts';
import { Informer } from './informer.ts';

export const CONTROLLER_LEASE_LABEL = 'kctl.dev/controller';
export const LEASE_NAMESPACE = 'kube-system';
export const LEASES_PATH = `/apis/coordination.k8s.io/v1/namespaces/${LEASE_NAMESPACE}/leases`;
const API_ANNOTATION = 'kctl.dev/api-server';
const KONNECTIVITY_ANNOTATION = 'kctl.dev/konnectivity';
export const LEASE_DURATION_S = 30;
export const RENEW_EVERY_MS = 10_000;

export interface LiveController {
  name: string;
  /** https URL of its kube-apiserver. */
  apiServer: string;
  /** host:port of its konnectivity agent endpoint. */
  konnectivity: string;
}

export interface Lease {
  metadata: { name: string; resourceVersion?: string; annotations?: Record<string, string> };
  spec?: { holderIdentity?: string; leaseDurationSeconds?: number; renewTime?: string };
}

/** The lease name of a controller: from its advertised address, which is unique in a cluster. */
export function controllerLeaseName(address: string): string {
  return `kctl-controller-${address.toLowerCase().replace(/[^a-z0-9]+/g, '-')}`;
}

/** A MicroTime, as the coordination API wants it. */
function microTime(d: Date): string {
  return d.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

export function controllerLease(name: string, c: Omit<LiveController, 'name'>, now = new Date()): KubeManifest {
  return {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: {
      name,
      namespace: LEASE_NAMESPACE,
      labels: { [CONTROLLER_LEASE_LABEL]: 'true' },
      annotations: { [API_ANNOTATION]: c.apiServer, [KONNECTIVITY_ANNOTATION]: c.konnectivity },
    },
    spec: { holderIdentity: name, leaseDurationSeconds: LEASE_DURATION_S, renewTime: microTime(now) },
  };
}

/** The controllers whose leases have not expired at `now`, by name. */
export function liveControllers(leases: Iterable<Lease>, now = Date.now()): LiveController[] {
  const out: LiveController[] = [];
  for (const l of leases) {
    const renewed = Date.parse(l.spec?.renewTime ?? '');
    const duration = (l.spec?.leaseDurationSeconds ?? LEASE_DURATION_S) * 1000;
    const a = l.metadata.annotations ?? {};
    if (!Number.isFinite(renewed) || renewed + duration <= now || !a[API_ANNOTATION] || !a[KONNECTIVITY_ANNOTATION]) continue;
    out.push({ name: l.metadata.name, apiServer: a[API_ANNOTATION], konnectivity: a[KONNECTIVITY_ANNOTATION] });
  }
  return out.sort((x, y) => x.name.localeCompare(y.name));
}

/**
 * Watches the controller leases and tells `onChange` the live set whenever it changes: on
 * events, and on a timer, because a lease expiring produces no event.
 */
export class ControllerLeaseWatch {
  private readonly informer: Informer<Lease>;
  private timer: NodeJS.Timeout | undefined;
  private last = '';

  constructor(
    kube: KubeClient,
    private readonly onChange: (live: LiveController[]) => void,
    private readonly onError?: (err: Error) => void,
  ) {
    this.informer = new Informer<Lease>(kube, LEASES_PATH, { labelSelector: `${CONTROLLER_LEASE_LABEL}=true` }, () => this.check(), onError);
  }

  get synced(): boolean {
    return this.informer.hasSynced;
  }

  live(): LiveController[] {
    return liveControllers(this.informer.store.values());
  }

  start(): void {
    this.informer.start();
    this.timer = setInterval(() => this.check(), 2_000);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.informer.stop();
  }

  private check(): void {
    if (!this.informer.hasSynced) return;
    const live = this.live();
    const key = live.map((c) => `${c.name}=${c.apiServer},${c.konnectivity}`).join(';');
    if (key === this.last) return;
    this.last = key;
    this.onChange(live);
  }
}
