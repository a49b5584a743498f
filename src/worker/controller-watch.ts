// The controllers' leases (the copies in kctl-controllers, the only leases a node may read), read
// with the node's credentials through the API balancer: the join
// token's controllers are where a node starts; from then on the leases say which are alive, and
// every follower handed in (the balancer's upstreams, the agent's servers) is told.
import type { Component, ComponentStatus } from '../base/component.ts';
import type { KubeClient } from '../kube/client.ts';
import { ControllerLeaseWatch, NODE_LEASES_PATH, type LiveController } from '../kube/controller-leases.ts';

/** Something that follows the live controllers. */
export interface ControllerFollower {
  controllersChanged(live: LiveController[]): void;
}

export class ControllerWatchComponent implements Component {
  readonly name = 'controller-watch';
  private readonly watch: ControllerLeaseWatch;
  private lastError: string | undefined;

  constructor(kube: KubeClient, followers: readonly ControllerFollower[]) {
    this.watch = new ControllerLeaseWatch(
      kube,
      (live) => {
        for (const f of followers) f.controllersChanged(live);
      },
      (err) => (this.lastError = err.message),
      NODE_LEASES_PATH,
    );
  }

  async start(): Promise<void> {
    this.watch.start();
  }

  async stop(): Promise<void> {
    await this.watch.stop();
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.watch.synced ? undefined : this.lastError };
  }
}
