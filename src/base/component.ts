// The shape every piece of kctl has (k0s's component manager): init, start, ready, stop.
// A manager starts components in order, gating each on the previous one's readiness, and
// stops them in reverse.

export type ComponentState = 'pending' | 'initializing' | 'starting' | 'running' | 'restarting' | 'failed' | 'stopping' | 'stopped';

export interface ComponentStatus {
  name: string;
  state: ComponentState;
  pid?: number;
  restarts: number;
  lastError?: string;
  /** Seconds since the component last became running. */
  uptimeSeconds?: number;
}

export interface Component {
  readonly name: string;
  /** Prepare files and directories; must be idempotent. */
  init(): Promise<void>;
  /** Start; returns once started (not necessarily ready). */
  start(): Promise<void>;
  /** Resolves when ready; rejects with a one-line reason if it never becomes ready. */
  ready(signal: AbortSignal): Promise<void>;
  stop(): Promise<void>;
  status(): ComponentStatus;
}
