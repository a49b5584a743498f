// This controller's presence in the cluster (kube/controller-leases.ts): it holds its Lease
// while it runs (renewed every 10 s, and within a second of its agent set changing; deleted on
// stop) and watches the others', so its konnectivity server announces the number of live
// controllers as the server count, and `kctl status` can say which controllers are alive and
// which agents each holds.
import type { Component, ComponentStatus } from '../base/component.ts';
import type { Logger } from '../base/log.ts';
import {
  controllerLease,
  controllerLeaseName,
  ControllerLeaseWatch,
  LEASES_PATH,
  RENEW_EVERY_MS,
  type LiveController,
} from '../kube/controller-leases.ts';
import type { KubeClient } from '../kube/client.ts';
import { apiServerUrl } from './bootstrap.ts';
import type { ClusterConfig } from './config.ts';
import { konnectivityAddress } from './tokens.ts';
import { messageOf } from '../base/errors.ts';

/** An agent set as one comparable string. */
const agentKey = (agents: string[]): string => [...agents].sort().join(',');

export class ControllerLeaseComponent implements Component {
  readonly name = 'controller-lease';
  private readonly leaseName: string;
  private readonly watch: ControllerLeaseWatch;
  private timer: NodeJS.Timeout | undefined;
  private lastError: string | undefined;
  private live: LiveController[] = [];
  private renewedAt = 0;
  private renewedAgents = '';
  private renewing: Promise<void> | undefined;

  constructor(
    private readonly cfg: ClusterConfig,
    private readonly kube: KubeClient,
    private readonly log: Logger,
    /** The agent ids this controller's konnectivity server holds now. */
    private readonly agents: () => string[] = () => [],
  ) {
    this.leaseName = controllerLeaseName(cfg.spec.api.address);
    this.watch = new ControllerLeaseWatch(
      kube,
      (live) => {
        this.live = live;
        this.log.info({ controllers: live.map((c) => c.name) }, `${live.length} live controller(s)`);
      },
      (err) => (this.lastError = err.message),
    );
  }

  /** What this controller's konnectivity server announces as servercount: the live controllers, itself included. */
  serverCount(): number {
    return Math.max(1, this.live.length + (this.live.some((c) => c.name === this.leaseName) ? 0 : 1));
  }

  /** The live controllers as the leases say now (with the agents each listed at its last renewal). */
  liveControllers(): LiveController[] {
    return this.watch.synced ? this.watch.live() : this.live;
  }

  async start(): Promise<void> {
    await this.renew();
    // Checked every second, written only when due or when the agent set changed.
    this.timer = setInterval(() => {
      if (this.renewing) return;
      if (Date.now() - this.renewedAt < RENEW_EVERY_MS && agentKey(this.agents()) === this.renewedAgents) return;
      this.renewing = this.renew().finally(() => (this.renewing = undefined));
    }, 1000);
    this.watch.start();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.renewing;
    await this.watch.stop();
    // Leaving on purpose: the others' server counts and the agents follow at once, not after 30 s.
    await this.kube.request('DELETE', `${LEASES_PATH}/${this.leaseName}`).catch(() => undefined);
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.lastError };
  }

  private async renew(): Promise<void> {
    const agents = this.agents();
    const lease = controllerLease(this.leaseName, { apiServer: apiServerUrl(this.cfg), konnectivity: konnectivityAddress(this.cfg), agents });
    try {
      await this.kube.apply(lease, { fieldManager: 'kctl', force: true });
      this.renewedAt = Date.now();
      this.renewedAgents = agentKey(agents);
      this.lastError = undefined;
    } catch (err) {
      this.lastError = `cannot renew lease ${this.leaseName}: ${messageOf(err)}`;
    }
  }
}
