// A component that sets something in the API from what the Nodes say (node-lease-access,
// kubernetes-endpoints): it reconciles once the node watch has synced, on every change of the
// Nodes, and now and then besides (an object edited or deleted by hand is set right again, and
// what else it reads, such as the live controllers, may have changed). One reconcile at a time.
import type { Component, ComponentContext, ComponentStatus } from '../../base/component.ts';
import type { Logger } from '../../base/log.ts';
import { SerialRunner } from '../../base/serial.ts';
import type { NodeWatchComponent } from './nodes.ts';

export abstract class NodeReconciler implements Component {
  abstract readonly name: string;
  protected log!: Logger;
  protected lastError: string | undefined;
  private readonly runner = new SerialRunner(() => (this.nodes.synced ? this.reconcile() : Promise.resolve()));
  private unsubscribe: (() => void) | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    protected readonly nodes: NodeWatchComponent,
    private readonly recheckMs: number,
  ) {}

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    this.unsubscribe = this.nodes.onChange(() => this.runner.schedule());
    this.timer = setInterval(() => {
      this.forget();
      this.runner.schedule();
    }, this.recheckMs);
    this.runner.schedule();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.unsubscribe?.();
    await this.runner.idle();
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.lastError };
  }

  /** Forgets what it believes the API holds, so the next reconcile looks and writes again. */
  protected abstract forget(): void;

  /** Sets the API right from the Nodes (synced by now); records a failure in lastError. */
  protected abstract reconcile(): Promise<void>;
}
