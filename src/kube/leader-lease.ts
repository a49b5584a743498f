// One holder among many processes (client-go's leader election, small): a coordination.k8s.io
// Lease in kube-system names its holder. A process takes the lease when it is absent, released,
// or has not changed for its whole duration as this process observed it (its own clock only, so
// clock skew between hosts does not matter); writes carry the resourceVersion read, so of two
// that try at once one wins. A holder that cannot renew stops believing it holds the lease when
// its last successful renewal is a duration (less a margin) old: it does not need the API to
// know it lost it.
import { KubeApiError, type KubeClient } from './client.ts';
import { LEASE_NAMESPACE, LEASES_PATH, microTime } from './controller-leases.ts';

export const LEADER_LEASE_DURATION_S = 30;
/** Held until this long before the others may take it: room for a slow request and clock rate drift. */
const SAFETY_MARGIN_MS = 5_000;

interface LeaseObject {
  apiVersion?: string;
  kind?: string;
  metadata: { name: string; namespace?: string; resourceVersion?: string; annotations?: Record<string, string> };
  spec?: {
    holderIdentity?: string;
    leaseDurationSeconds?: number;
    acquireTime?: string;
    renewTime?: string;
    leaseTransitions?: number;
  };
}

export class LeaderLease {
  private readonly path: string;
  private heldUntil = 0;
  /** The record as last read, and when (this process's clock) it was first seen unchanged. */
  private observed: { key: string; at: number } | undefined;
  private last: LeaseObject | undefined;

  constructor(
    private readonly kube: KubeClient,
    private readonly name: string,
    readonly identity: string,
    private readonly now: () => number = Date.now,
    /** How long the lease lasts unrenewed. */
    readonly durationS: number = LEADER_LEASE_DURATION_S,
  ) {
    this.path = `${LEASES_PATH}/${name}`;
  }

  /** True while this process surely holds the lease. */
  holding(): boolean {
    return this.now() < this.heldUntil;
  }

  /** The holder as last read ('' when released or never read). */
  holder(): string {
    if (this.holding()) return this.identity;
    return this.last?.spec?.holderIdentity ?? '';
  }

  /** The lease's annotations as last read or written (what the holder publishes). */
  annotations(): Record<string, string> {
    return this.last?.metadata.annotations ?? {};
  }

  /**
   * Takes or renews the lease (writing `annotations` into it when it does); true when this
   * process holds it now. Throws when the API cannot be asked (holding() then runs out by itself).
   */
  async tryAcquireOrRenew(annotations: Record<string, string> = {}): Promise<boolean> {
    const started = this.now();
    const current = await this.kube.find<LeaseObject>(this.path);
    const renewTime = microTime(new Date(started));
    let next: LeaseObject;
    if (!current) {
      next = {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name: this.name, namespace: LEASE_NAMESPACE, annotations },
        spec: {
          holderIdentity: this.identity,
          leaseDurationSeconds: this.durationS,
          acquireTime: renewTime,
          renewTime,
          leaseTransitions: 0,
        },
      };
    } else {
      this.last = current;
      const spec = current.spec ?? {};
      const key = `${spec.holderIdentity ?? ''}@${spec.renewTime ?? ''}`;
      if (this.observed?.key !== key) this.observed = { key, at: started };
      const mine = spec.holderIdentity === this.identity;
      const free =
        !spec.holderIdentity || started >= this.observed.at + (spec.leaseDurationSeconds ?? this.durationS) * 1000;
      if (!mine && !free) {
        this.heldUntil = 0;
        return false;
      }
      next = {
        ...current,
        metadata: { ...current.metadata, annotations: { ...current.metadata.annotations, ...annotations } },
        spec: {
          ...spec,
          holderIdentity: this.identity,
          leaseDurationSeconds: this.durationS,
          renewTime,
          ...(mine ? {} : { acquireTime: renewTime, leaseTransitions: (spec.leaseTransitions ?? 0) + 1 }),
        },
      };
    }
    try {
      this.last = current
        ? await this.kube.request<LeaseObject>('PUT', this.path, next)
        : await this.kube.request<LeaseObject>('POST', LEASES_PATH, next);
    } catch (err) {
      // Another process wrote first (409 Conflict, or AlreadyExists on create): it holds the lease.
      if (err instanceof KubeApiError && err.status === 409) {
        this.heldUntil = 0;
        return false;
      }
      throw err;
    }
    this.heldUntil = started + this.durationS * 1000 - SAFETY_MARGIN_MS;
    return true;
  }

  /** Whether the lease names this identity as its holder now (as the API says; a process that restarted may hold it). */
  async heldByMe(): Promise<boolean> {
    const current = await this.kube.find<LeaseObject>(this.path);
    if (current) this.last = current;
    return current?.spec?.holderIdentity === this.identity;
  }

  /**
   * Gives the lease up at once (on stop), keeping its annotations; quiet when it is not held or the
   * API is gone. `asRecorded`: also when this process did not take it (its holder before a restart).
   */
  async release(asRecorded = false): Promise<void> {
    if (!this.last || (!this.holding() && !(asRecorded && this.last.spec?.holderIdentity === this.identity))) return;
    this.heldUntil = 0;
    const spec = { ...this.last.spec };
    delete spec.holderIdentity;
    await this.kube
      .request('PUT', this.path, { ...this.last, spec: { ...spec, leaseDurationSeconds: 1 } })
      .catch(() => undefined);
  }
}
