// This controller's presence in the cluster (kube/controller-leases.ts): it holds its Lease
// while it runs (renewed every 10 s, and within a second of its agent set changing; deleted on
// stop) and watches the others' (LiveControllers, handed to whoever reads them), so its
// konnectivity server announces the number of live controllers as the server count, and
// `kctl status` can say which controllers are alive and which agents each holds. The lease is
// written twice, in kube-system for the controllers and in kctl-controllers for the nodes.
import type { Component, ComponentContext, ComponentStatus } from '../../base/component.ts';
import type { Logger } from '../../base/log.ts';
import {
  controllerLease,
  ControllerLeaseWatch,
  LEASE_NAMESPACE,
  LEASES_PATH,
  NODE_LEASE_NAMESPACE,
  NODE_LEASES_PATH,
  RENEW_EVERY_MS,
  type LiveController,
} from '../../kube/controller-leases.ts';
import type { KubeClient } from '../../kube/client.ts';
import type { MemberUpgrade } from '../../kube/upgrade-plan.ts';
import type { Release } from '../../base/version.ts';
import type { ClusterConfig } from '../config/config.ts';
import { apiServerUrl, frontDoorEndpoint, joinServerUrl, konnectivityAddress } from '../config/urls.ts';
import { messageOf } from '../../base/errors.ts';
import type { LoadedKeys } from '../encryption/encryption.ts';
import type { HeldAgents } from '../components/konnectivity.ts';

const upgradeKey = (u: MemberUpgrade | undefined): string | undefined => (u ? JSON.stringify(u) : undefined);

/** An agent set as one comparable string. */
const agentKey = (agents: string[]): string => [...agents].sort().join(',');

/**
 * Every live controller as the leases say: made before the components that read it (the
 * konnectivity server's count, the reserved space, the status) and handed to each of them. The
 * lease component runs its watch, after its first renewal.
 */
export class LiveControllers {
  private readonly watch: ControllerLeaseWatch;
  private live: LiveController[] = [];
  private log: Logger | undefined;
  private onError: (message: string) => void = () => undefined;

  /** @param self this controller's lease name (memberLeaseName). */
  constructor(
    readonly self: string,
    kube: KubeClient,
  ) {
    this.watch = new ControllerLeaseWatch(
      kube,
      (live) => {
        this.live = live;
        this.log?.info({ controllers: live.map((c) => c.name) }, `${live.length} live controller(s)`);
      },
      (err) => this.onError(err.message),
    );
  }

  /** What this controller's konnectivity server announces as servercount: the live controllers, itself included. */
  serverCount(): number {
    return Math.max(1, this.live.length + (this.live.some((c) => c.name === this.self) ? 0 : 1));
  }

  /** The live controllers as the leases say now (with the agents each listed at its last renewal). */
  liveControllers(): LiveController[] {
    return this.watch.synced ? this.watch.live() : this.live;
  }

  /** Watches the leases; changes are logged to `log`, the watch's errors go to `onError`. */
  start(log: Logger, onError: (message: string) => void): void {
    this.log = log;
    this.onError = onError;
    this.watch.start();
  }

  stop(): Promise<void> {
    return this.watch.stop();
  }
}

export interface ControllerLeaseOptions {
  cfg: ClusterConfig;
  kube: KubeClient;
  /** Watched from the start on (the lease goes first: this controller is one of them). */
  controllers: LiveControllers;
  /** Listed in the lease, rewritten within a second of a change. */
  agents: HeldAgents;
  /** The encryption keys kube-apiserver has loaded, named in the lease within a second of a change. */
  encryption?: LoadedKeys;
  /** The CA trust bundle this controller uses, named in the lease within a second of a change. */
  caBundle?: { loadedCaBundle(): string | undefined };
  /** The release this controller runs. */
  release: Release;
  /** Its upgrade state, named in the lease within a second of a change. */
  upgrade?: { memberUpgrade(): MemberUpgrade | undefined };
}

export class ControllerLeaseComponent implements Component {
  readonly name = 'controller-lease';
  private readonly leaseName: string;
  private log!: Logger;
  private timer: NodeJS.Timeout | undefined;
  private lastError: string | undefined;
  private renewedAt = 0;
  private renewedAgents = '';
  private renewedKeys: string | undefined;
  private renewedBundle: string | undefined;
  private renewedUpgrade: string | undefined;
  private renewing: Promise<void> | undefined;

  constructor(private readonly o: ControllerLeaseOptions) {
    this.leaseName = o.controllers.self;
  }

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    await this.renew();
    // Checked every second, written only when due or when the agent set changed.
    this.timer = setInterval(() => {
      if (this.renewing) return;
      const due = Date.now() - this.renewedAt >= RENEW_EVERY_MS;
      if (
        !due &&
        agentKey(this.o.agents.agentIds()) === this.renewedAgents &&
        this.o.encryption?.loadedKeys() === this.renewedKeys &&
        this.o.caBundle?.loadedCaBundle() === this.renewedBundle &&
        upgradeKey(this.o.upgrade?.memberUpgrade()) === this.renewedUpgrade
      )
        return;
      this.renewing = this.renew().finally(() => (this.renewing = undefined));
    }, 1000);
    this.o.controllers.start(this.log, (message) => (this.lastError = message));
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.renewing;
    await this.o.controllers.stop();
    // Leaving on purpose: the others' server counts and the agents follow at once, not after 30 s.
    for (const path of [LEASES_PATH, NODE_LEASES_PATH])
      await this.o.kube.request('DELETE', `${path}/${this.leaseName}`).catch(() => undefined);
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.lastError };
  }

  private async renew(): Promise<void> {
    const agents = this.o.agents.agentIds();
    const encryptionKeys = this.o.encryption?.loadedKeys();
    const caBundle = this.o.caBundle?.loadedCaBundle();
    const upgrade = this.o.upgrade?.memberUpgrade();
    const lease = {
      apiServer: apiServerUrl(this.o.cfg),
      konnectivity: konnectivityAddress(this.o.cfg),
      agents,
      encryptionKeys,
      caBundle,
      release: this.o.release,
      upgrade,
      executables: joinServerUrl(this.o.cfg),
      frontDoor: frontDoorEndpoint(this.o.cfg),
    };
    const now = new Date();
    try {
      for (const namespace of [LEASE_NAMESPACE, NODE_LEASE_NAMESPACE])
        await this.o.kube.apply(controllerLease(this.leaseName, lease, now, namespace), {
          fieldManager: 'kctl',
          force: true,
        });
      this.renewedAt = Date.now();
      this.renewedAgents = agentKey(agents);
      this.renewedKeys = encryptionKeys;
      this.renewedBundle = caBundle;
      this.renewedUpgrade = upgradeKey(upgrade);
      this.lastError = undefined;
    } catch (err) {
      this.lastError = `cannot renew lease ${this.leaseName}: ${messageOf(err)}`;
    }
  }
}
