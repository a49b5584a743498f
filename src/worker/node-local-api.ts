// Behind a front door, pods reach the API at one node-local address on every node
// (spec.frontDoor.nodeLocalAddress, which the controllers' leases announce): the loopback device
// holds it (/32, labelled lo:kctl-api) and the API balancer listens there too. The kubernetes
// Service's endpoint is that address (controller/cluster/kubernetes-endpoints.ts), so kube-proxy
// sends a pod's API connections to its own node, whose balancer carries them in the node API
// tunnel through the door: no pod needs a route to a controller host. The address stays when kctl
// stops (pods keep their endpoint across a restart); kctl reset removes it.
import type { Component, ComponentContext, ComponentStatus } from '../base/component.ts';
import { splitHostPort } from '../base/addresses.ts';
import { messageOf } from '../base/errors.ts';
import type { Logger } from '../base/log.ts';
import { specialRange } from '../base/ownership.ts';
import { SerialRunner } from '../base/serial.ts';
import { setOnlyAddress } from '../host/ip.ts';
import type { LiveController } from '../kube/controller-leases.ts';
import type { ControllerFollower } from './controller-watch.ts';

/** The label of the address on the loopback device. */
export const NODE_LOCAL_LABEL = 'lo:kctl-api';
/** A failed attempt is tried again after this long (the leases may not change for a while). */
const RETRY_MS = 10_000;

export class NodeLocalApiComponent implements Component, ControllerFollower {
  readonly name = 'node-local-api';
  private log!: Logger;
  private lastError: string | undefined;
  /** What the leases ask for (host:port), and what is in place. */
  private wanted: string | undefined;
  private applied: string | undefined;
  private readonly runner = new SerialRunner(() => this.reconcile());
  private retry: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(private readonly balancer: { servePods(address: string | undefined): Promise<void> }) {}

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retry);
    await this.runner.idle();
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.lastError };
  }

  /** The first live controller that names a node-local address decides (every controller's config names the same). */
  controllersChanged(live: LiveController[]): void {
    this.wanted = live.map((c) => c.frontDoor?.nodeLocal).find((a) => a !== undefined);
    this.runner.schedule();
  }

  private async reconcile(): Promise<void> {
    const want = this.wanted;
    clearTimeout(this.retry);
    if (want === this.applied || this.stopped) return;
    try {
      if (want) {
        const at = splitHostPort(want);
        const bad = at ? specialRange(at.host) : 'not host:port';
        if (!at || bad) throw new Error(`the controllers name ${want} for it, ${bad}`);
        await setOnlyAddress('lo', at.host, NODE_LOCAL_LABEL);
        await this.balancer.servePods(want);
        this.log.info({ address: want, label: NODE_LOCAL_LABEL }, 'pods reach the API here, on this node');
      } else {
        await this.balancer.servePods(undefined);
        await removeNodeLocalAddress();
        if (this.applied) this.log.info({ address: this.applied }, 'no front door: pods no longer reach the API here');
      }
      this.applied = want;
      this.lastError = undefined;
    } catch (err) {
      this.lastError = `cannot serve the API to pods at the node-local address: ${messageOf(err)}`;
      this.log.warn(this.lastError);
      this.retry = setTimeout(() => this.runner.schedule(), RETRY_MS);
    }
  }
}

/** Removes the address from the loopback device; nothing when it is not there. */
export const removeNodeLocalAddress = (): Promise<void> => setOnlyAddress('lo', undefined, NODE_LOCAL_LABEL);
