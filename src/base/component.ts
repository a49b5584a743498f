// The shape every piece of kctl has (k0s's component manager): init, start, ready, stop, all
// optional. A manager starts components in order, gating each on the previous one's readiness
// (or an earlier one's, named by startAfter), stops them in reverse, and keeps each one's state,
// so a component writes only the hooks it needs.
import type { Logger } from './log.ts';

export type ComponentState =
  'pending' | 'initializing' | 'starting' | 'running' | 'restarting' | 'failed' | 'stopping' | 'stopped';

export interface ComponentStatus {
  name: string;
  state: ComponentState;
  pid?: number;
  restarts: number;
  lastError?: string;
  /** Seconds since the component last became running. */
  uptimeSeconds?: number;
}

/** What the manager hands every component at init. */
export interface ComponentContext {
  /** This component's logger, named after the component. */
  readonly log: Logger;
  /** Every component's status as the manager keeps it (e.g. for the status socket). */
  statuses(): ComponentStatus[];
}

export interface Component {
  readonly name: string;
  /** How long the manager waits for ready() (e.g. kube-apiserver on a cold etcd); default the manager's. */
  readonly readyTimeoutMs?: number;
  /**
   * The name of an earlier component: this one starts as soon as that one is ready, beside the
   * components listed between them, instead of after the one just before it. The manager still
   * waits for its readiness at its own place in the list, and stops it in list order.
   */
  readonly startAfter?: string;
  /** Prepare files and directories; must be idempotent. Runs for every component before any starts. */
  init?(ctx: ComponentContext): Promise<void>;
  /** Start; returns once started (not necessarily ready). */
  start?(): Promise<void>;
  /** Resolves when ready; rejects with a one-line reason if it never becomes ready. */
  ready?(signal: AbortSignal): Promise<void>;
  stop?(): Promise<void>;
  /**
   * What the component knows beyond the manager's own bookkeeping (a child's pid and restarts,
   * a problem while running). Fields given here win over the manager's.
   */
  status?(): Partial<ComponentStatus>;
}

/** A component restarted on purpose (new credentials it reads only at start), then awaited until ready: a supervised process. */
export interface Restartable {
  readonly name: string;
  restart(reason: string): Promise<void>;
  ready(signal: AbortSignal): Promise<void>;
}
