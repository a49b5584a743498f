// CoreDNS replicas follow the cluster's size, as k0s does: min(spec.addons.coredns.replicas,
// number of Nodes), at least 1. With the Deployment's required anti-affinity (one replica per
// node) a one-node cluster then runs one replica instead of leaving one Pending, and the second
// replica starts on the second node as soon as it joins, instead of both piling onto the first
// node that became Ready. The add-on's manifest leaves spec.replicas out, so the manifest applier
// and this scaler never fight over it; the scaler writes it through the scale subresource.
import type { Component, ComponentContext, ComponentStatus } from '../../base/component.ts';
import type { Logger } from '../../base/log.ts';
import { KubeApiError, type KubeClient } from '../../kube/client.ts';
import type { NodeWatchComponent } from '../nodes/nodes.ts';
import { messageOf } from '../../base/errors.ts';

const SCALE_PATH = '/apis/apps/v1/namespaces/kube-system/deployments/coredns/scale';
/** Also re-checked on this period: the Deployment may be created (or scaled by hand) after a Node change. */
const RECHECK_MS = 5_000;

interface Scale {
  spec?: { replicas?: number };
}

/** The replica count for `nodes` Nodes with at most `max` replicas. */
export function corednsReplicas(nodes: number, max: number): number {
  return Math.max(1, Math.min(max, nodes));
}

export class CorednsScalerComponent implements Component {
  readonly name = 'coredns-scaler';
  private log!: Logger;
  private timer: NodeJS.Timeout | undefined;
  private unsubscribe: (() => void) | undefined;
  private running: Promise<void> | undefined;
  private lastError: string | undefined;

  constructor(
    private readonly kube: KubeClient,
    private readonly nodes: NodeWatchComponent,
    private readonly max: number,
  ) {}

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    this.unsubscribe = this.nodes.onChange(() => void this.check());
    this.timer = setInterval(() => void this.check(), RECHECK_MS);
    void this.check();
  }

  /** One check at a time; a check asked for while one runs is covered by the next period. */
  private check(): Promise<void> {
    if (!this.nodes.synced || this.running) return this.running ?? Promise.resolve();
    this.running = this.scale().finally(() => (this.running = undefined));
    return this.running;
  }

  private async scale(): Promise<void> {
    const want = corednsReplicas(this.nodes.size, this.max);
    try {
      const have = (await this.kube.request<Scale>('GET', SCALE_PATH)).spec?.replicas;
      if (have === want) return;
      await this.kube.request(
        'PATCH',
        SCALE_PATH,
        { spec: { replicas: want } },
        { contentType: 'application/merge-patch+json' },
      );
      this.lastError = undefined;
      this.log.info(
        { replicas: want, was: have, nodes: this.nodes.size },
        `CoreDNS scaled to ${want} replica(s) for ${this.nodes.size} node(s)`,
      );
    } catch (err) {
      // Not there yet: the manifest applier creates it; the next check scales it.
      if (err instanceof KubeApiError && err.status === 404) return;
      this.lastError = messageOf(err);
    }
  }

  async stop(): Promise<void> {
    this.unsubscribe?.();
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.lastError };
  }
}
