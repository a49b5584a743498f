// `kctl operator run`: the operator as one component. It takes the leader Lease (kube-system,
// kctl-operator) so that of several replicas one acts, watches every KctlCluster, and while it
// leads reconciles them one run at a time: on every change, and every `resyncMs` (a pod becoming
// ready is not a change of the object). A replica that loses the Lease stops acting at once.
import { hostname } from 'node:os';
import type { Component, ComponentContext } from '../base/component.ts';
import { messageOf } from '../base/errors.ts';
import type { Logger } from '../base/log.ts';
import type { Release } from '../base/version.ts';
import { SerialRunner } from '../base/serial.ts';
import type { KubeClient } from '../kube/client.ts';
import { Informer } from '../kube/informer.ts';
import { LeaderLease } from '../kube/leader-lease.ts';
import { KCTL_CLUSTER } from './crd.ts';
import type { ManagementDoor } from './door-keys.ts';
import type { KctlCluster } from './objects.ts';
import { ClusterReconciler } from './reconcile.ts';

export const OPERATOR_DEFAULTS = {
  /** How often every cluster is looked at again without a change. */
  resyncMs: 10_000,
  /** How often the leader Lease is renewed or tried. */
  leaseEveryMs: 5_000,
  leaseName: 'kctl-operator',
};

export interface OperatorOptions {
  kube: KubeClient;
  /** The management cluster's front door (clusters with spec.exposure.type FrontDoor are behind it). */
  door?: ManagementDoor;
  /** This kctl's release (its payload's): what a roll to its own version brings (versions.ts). */
  release: Release;
  /** This replica's name in the Lease; default the host name and pid. */
  identity?: string;
  resyncMs?: number;
  leaseEveryMs?: number;
}

export class OperatorComponent implements Component {
  readonly name = 'operator';
  private log!: Logger;
  private readonly o: Required<Omit<OperatorOptions, 'door'>> & Pick<OperatorOptions, 'door'>;
  private informer!: Informer<KctlCluster & { metadata: { name: string; namespace: string } }>;
  private readonly lease: LeaderLease;
  private readonly runner = new SerialRunner(() => this.reconcileAll());
  private timers: NodeJS.Timeout[] = [];
  private leading = false;

  constructor(o: OperatorOptions) {
    this.o = {
      ...OPERATOR_DEFAULTS,
      identity: `${hostname()}-${process.pid}`,
      ...o,
    };
    this.lease = new LeaderLease(o.kube, OPERATOR_DEFAULTS.leaseName, this.o.identity);
  }

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
    const path = `/apis/${KCTL_CLUSTER.group}/${KCTL_CLUSTER.version}/${KCTL_CLUSTER.plural}`;
    this.informer = new Informer(
      this.o.kube,
      path,
      { watchTimeoutSeconds: 60 },
      () => this.runner.schedule(),
      (err) => this.log.warn({ err: messageOf(err) }, 'watching KctlClusters failed; retrying'),
    );
  }

  async start(): Promise<void> {
    this.informer.start();
    await this.lead();
    this.timers.push(
      setInterval(() => void this.lead(), this.o.leaseEveryMs),
      setInterval(() => this.runner.schedule(), this.o.resyncMs),
    );
  }

  private async lead(): Promise<void> {
    const was = this.leading;
    this.leading = await this.lease.tryAcquireOrRenew().catch((err: unknown) => {
      this.log.warn({ err: messageOf(err) }, 'could not renew the leader Lease');
      return this.lease.holding();
    });
    if (this.leading !== was)
      this.log.info(
        { identity: this.o.identity },
        this.leading
          ? 'leading: reconciling KctlClusters'
          : `not leading: ${this.lease.holder() || 'nobody'} holds the Lease`,
      );
    if (this.leading && !was) this.runner.schedule();
  }

  private async reconcileAll(): Promise<void> {
    if (!this.leading || !this.lease.holding() || !this.informer.hasSynced) return;
    const clusters = () => [...this.informer.store.values()];
    const reconciler = new ClusterReconciler(this.o.kube, this.log, {
      door: this.o.door,
      clusters,
      release: this.o.release,
    });
    for (const c of this.informer.store.values()) {
      if (!this.lease.holding()) return;
      await reconciler.reconcile(c);
    }
  }

  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    await this.informer.stop();
    await this.runner.idle();
    if (this.leading) await this.lease.release().catch(() => undefined);
  }

  status() {
    return { lastError: this.leading ? undefined : `not leading (${this.lease.holder() || 'nobody'} holds the Lease)` };
  }
}
