// A node's part in upgrades, so far: it names the release it runs on its own Node object
// (kctl.dev/version), which `kctl upgrade status` shows and which a plan waits for before it is
// done. Written at start and again every minute (an annotation someone removed comes back);
// only the node's own object, with the node's own credentials.
import type { Component, ComponentContext, ComponentStatus } from '../base/component.ts';
import { messageOf } from '../base/errors.ts';
import type { Logger } from '../base/log.ts';
import type { Release } from '../base/version.ts';
import type { KubeClient } from '../kube/client.ts';
import { releaseString, VERSION_ANNOTATION } from '../kube/upgrade-plan.ts';

const REPORT_EVERY_MS = 60_000;
/** The first reports come sooner: the Node object appears only once kubelet registered it. */
const RETRY_MS = 5_000;

export class NodeReleaseComponent implements Component {
  readonly name = 'node-release';
  private log!: Logger;
  private timer: NodeJS.Timeout | undefined;
  private reported = false;
  private lastError: string | undefined;

  constructor(
    private readonly kube: KubeClient,
    private readonly nodeName: string,
    private readonly release: Release,
  ) {}

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    void this.report();
  }

  async stop(): Promise<void> {
    clearTimeout(this.timer);
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.lastError };
  }

  private async report(): Promise<void> {
    const value = releaseString(this.release);
    try {
      await this.kube.request('PATCH', `/api/v1/nodes/${encodeURIComponent(this.nodeName)}`, {
        metadata: { annotations: { [VERSION_ANNOTATION]: value } },
      });
      if (!this.reported) this.log.info({ release: value }, 'the node names the kctl release it runs');
      this.reported = true;
      this.lastError = undefined;
    } catch (err) {
      this.lastError = `cannot name the release on node ${this.nodeName}: ${messageOf(err)}`;
    }
    this.timer = setTimeout(() => void this.report(), this.reported ? REPORT_EVERY_MS : RETRY_MS);
  }
}
