// Whose turn it is to renew certificates, in HA: one Lease (kube-system/kctl-pki-renewal) that a
// controller holds while it renews and restarts what must pick up its new certificates, so the
// controllers take turns and the others keep serving meanwhile. A lease left by a controller that
// died expires after LEASE_S. The turn never blocks a renewal for good: when the API does not
// answer for 30 s (which an expiring certificate may be the cause of) or the turn does not come
// within 10 minutes, the controller renews alone, as a single controller would.
import { setTimeout as sleep } from 'node:timers/promises';
import { messageOf } from '../../base/errors.ts';
import type { Logger } from '../../base/log.ts';
import { KubeApiError, type KubeClient } from '../../kube/client.ts';
import { LEASES_PATH, LEASE_NAMESPACE, microTime, type Lease } from '../../kube/controller-leases.ts';
import type { RenewalTurn } from './pki-renewer.ts';

export const PKI_TURN_LEASE = 'kctl-pki-renewal';
/** Long enough for a renewal and two component restarts; a holder that died frees the turn after this. */
const LEASE_S = 300;

/** How long to wait for the turn, and for an API that does not answer; how often to ask. */
export interface TurnTimings {
  giveUpMs: number;
  apiGiveUpMs: number;
  retryMs: number;
}
const TIMINGS: TurnTimings = { giveUpMs: 10 * 60_000, apiGiveUpMs: 30_000, retryMs: 3_000 };

export class LeaseTurn implements RenewalTurn {
  constructor(
    private readonly kube: Pick<KubeClient, 'request'>,
    /** This controller's name in the lease (its controller lease name). */
    private readonly holder: string,
    private readonly timings: TurnTimings = TIMINGS,
  ) {}

  async acquire(signal: AbortSignal, log: Logger): Promise<() => Promise<void>> {
    const giveUp = Date.now() + this.timings.giveUpMs;
    let waitingFor: string | undefined;
    let failingSince: number | undefined;
    for (;;) {
      let result: 'taken' | { heldBy: string } | { error: string };
      try {
        result = await this.tryTake();
      } catch (err) {
        result = { error: messageOf(err) };
      }
      if (result === 'taken') return () => this.release(log);
      if ('heldBy' in result && result.heldBy !== waitingFor) {
        waitingFor = result.heldBy;
        log.info(
          { holder: result.heldBy },
          'another controller is renewing its certificates; waiting for its turn to end',
        );
      }
      failingSince = 'error' in result ? (failingSince ?? Date.now()) : undefined;
      const apiGone = failingSince !== undefined && Date.now() - failingSince >= this.timings.apiGiveUpMs;
      if (Date.now() >= giveUp || apiGone || signal.aborted) {
        const why = 'error' in result ? `the API did not answer (${result.error})` : `${result.heldBy} kept the turn`;
        log.warn(`renewing without the turn: ${why}`);
        return async () => undefined;
      }
      await sleep(this.timings.retryMs, undefined, { signal }).catch(() => undefined);
    }
  }

  /** Takes the lease when it is free, expired or already ours; a conflict means someone else took it first. */
  private async tryTake(): Promise<'taken' | { heldBy: string }> {
    const path = `${LEASES_PATH}/${PKI_TURN_LEASE}`;
    let lease: Lease | undefined;
    try {
      lease = await this.kube.request<Lease>('GET', path);
    } catch (err) {
      if (!(err instanceof KubeApiError && err.status === 404)) throw err;
    }
    const holder = lease?.spec?.holderIdentity ?? '';
    const renewed = lease?.spec?.renewTime ? Date.parse(lease.spec.renewTime) : 0;
    const expired = renewed + (lease?.spec?.leaseDurationSeconds ?? LEASE_S) * 1000 < Date.now();
    if (holder && holder !== this.holder && !expired) return { heldBy: holder };
    const body = {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: {
        name: PKI_TURN_LEASE,
        namespace: LEASE_NAMESPACE,
        ...(lease ? { resourceVersion: lease.metadata.resourceVersion } : {}),
      },
      spec: { holderIdentity: this.holder, leaseDurationSeconds: LEASE_S, renewTime: microTime(new Date()) },
    };
    try {
      await (lease ? this.kube.request('PUT', path, body) : this.kube.request('POST', LEASES_PATH, body));
    } catch (err) {
      if (err instanceof KubeApiError && (err.status === 409 || err.status === 422))
        return { heldBy: 'another controller' };
      throw err;
    }
    return 'taken';
  }

  /** Deletes the lease if it is still ours (the precondition makes sure): the next controller takes it at once. */
  private async release(log: Logger): Promise<void> {
    const path = `${LEASES_PATH}/${PKI_TURN_LEASE}`;
    try {
      const lease = await this.kube.request<Lease>('GET', path);
      if (lease.spec?.holderIdentity !== this.holder) return;
      await this.kube.request('DELETE', path, {
        apiVersion: 'v1',
        kind: 'DeleteOptions',
        preconditions: { resourceVersion: lease.metadata.resourceVersion },
      });
    } catch (err) {
      // It expires on its own.
      log.warn(`cannot hand the certificate renewal turn on: ${messageOf(err)}`);
    }
  }
}
