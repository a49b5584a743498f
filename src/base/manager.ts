// Starts components in order, each gated on the previous one's readiness (or on an earlier one's:
// Component.startAfter), and stops them in reverse (k0s pkg/component/manager). Keeps every
// component's state, so components only write the hooks they need. Knows nothing about what the
// components are.
import { componentLogger, type Logger } from './log.ts';
import type { Component, ComponentContext, ComponentState, ComponentStatus } from './component.ts';
import { settlesWithin, untilAborted } from './wait.ts';
import { asError, reasonOf } from './errors.ts';
import { definedOnly } from './defined.ts';

export const DEFAULT_READY_TIMEOUT_MS = 120_000;
/**
 * How long stop() lets a component's start() that is still running finish before it stops the
 * component anyway: what a start sets up after its stop() ran would be left running.
 */
const START_SETTLE_MS = 10_000;

export interface ComponentManagerOptions {
  /** For components without their own `readyTimeoutMs`. Default 120 s. */
  readyTimeoutMs?: number;
  /** One line of progress per step ("starting kube-apiserver (3/8)"), e.g. for systemd's STATUS=. */
  onProgress?: (text: string) => void;
}

/** The manager's view of one component. */
interface Tracked {
  state: ComponentState;
  lastError?: string;
  runningSince?: number;
}

export class ComponentManager {
  private readonly components: readonly Component[];
  private readonly tracked = new Map<Component, Tracked>();
  private readonly readyTimeoutMs: number;
  private readonly onProgress: (text: string) => void;
  /** Started (or half-started) components, in start order; stop() pops from the end. */
  private readonly started: Component[] = [];
  /** Aborted by stop(): a start in progress gives up waiting for readiness. */
  private readonly startAbort = new AbortController();
  private startCalled = false;
  /** The start() calls still running (more than one while components start ahead of their turn). */
  private readonly inStart = new Map<Component, Promise<unknown>>();
  /** Aborted when start() fails: components starting ahead of their turn stop waiting for readiness. */
  private readonly startFailed = new AbortController();
  private stopping?: Promise<void>;

  constructor(
    components: readonly Component[],
    private readonly log: Logger,
    opts: ComponentManagerOptions = {},
  ) {
    const names = new Set<string>();
    for (const c of components) {
      if (names.has(c.name)) throw new Error(`component ${c.name} is listed twice`);
      if (c.startAfter !== undefined && !names.has(c.startAfter))
        throw new Error(`component ${c.name} starts after ${c.startAfter}, which is not listed before it`);
      names.add(c.name);
      this.tracked.set(c, { state: 'pending' });
    }
    this.components = components;
    this.readyTimeoutMs = opts.readyTimeoutMs ?? DEFAULT_READY_TIMEOUT_MS;
    this.onProgress = opts.onProgress ?? (() => undefined);
  }

  /** True once stop() was called (a start in progress then ends with an error). */
  get stopRequested(): boolean {
    return this.startAbort.signal.aborted;
  }

  /**
   * init() of all, in order; then start() and ready() of each before the next (a component with
   * startAfter begins once that one is ready, and is waited for at its place). On failure the
   * components already started are stopped in reverse and the error names the component.
   */
  async start(): Promise<void> {
    if (this.startCalled) throw new Error('component manager already started');
    this.startCalled = true;
    for (const c of this.components) {
      this.throwIfStopping();
      this.mark(c, 'initializing');
      try {
        await c.init?.(this.contextOf(c));
      } catch (err) {
        this.mark(c, 'failed', reasonOf(err));
        throw new Error(`${c.name} failed to initialise: ${reasonOf(err)}`, { cause: err });
      }
      this.mark(c, 'pending');
    }
    // Components started ahead of their turn (startAfter): the loop waits for them at their place.
    const ahead = new Map<Component, Promise<void>>();
    for (const [i, c] of this.components.entries()) {
      this.throwIfStopping();
      try {
        await (ahead.get(c) ?? this.startOne(c, i));
        this.throwIfStopping(); // stopped while this one started: the start is over, not done
      } catch (err) {
        this.throwIfStopping();
        this.startFailed.abort();
        const failure = asError(err);
        this.mark(c, 'failed', failure.message);
        this.log.error({ name: c.name }, `${failure.message}; stopping the components already started`);
        this.onProgress(failure.message);
        await this.stopStarted();
        throw failure;
      }
      for (const [j, d] of this.components.entries())
        if (j > i && d.startAfter === c.name) {
          const started = this.startOne(d, j);
          started.catch(() => undefined); // reported when the loop reaches it
          ahead.set(d, started);
        }
    }
  }

  /** start() then ready() of one component; marks it running and logs how long it took. */
  private async startOne(c: Component, i: number): Promise<void> {
    const t0 = performance.now();
    this.log.info({ name: c.name }, `starting ${c.name}`);
    this.onProgress(`starting ${c.name} (${i + 1}/${this.components.length})`);
    // Recorded before start() so a component that half-started is stopped too.
    this.started.push(c);
    this.mark(c, 'starting');
    const starting = (async () => c.start?.())();
    this.inStart.set(
      c,
      starting.catch(() => undefined),
    );
    try {
      await starting;
    } catch (err) {
      throw new Error(`${c.name} failed to start: ${reasonOf(err)}`, { cause: err });
    } finally {
      this.inStart.delete(c);
    }
    await this.waitReady(c);
    if (this.startAbort.signal.aborted || this.startFailed.signal.aborted) return;
    this.mark(c, 'running');
    this.log.info(
      { name: c.name, seconds: round1((performance.now() - t0) / 1000) },
      `${c.name} ready in ${seconds(performance.now() - t0)}`,
    );
  }

  /** Stops what was started, in reverse; a failing stop is logged and the rest still stop. */
  stop(): Promise<void> {
    this.startAbort.abort();
    return this.stopStarted();
  }

  status(): ComponentStatus[] {
    return this.components.map((c) => {
      const t = this.tracked.get(c) ?? { state: 'pending' };
      const own = c.status?.() ?? {};
      return {
        name: c.name,
        state: t.state,
        restarts: 0,
        lastError: t.lastError,
        uptimeSeconds: t.runningSince === undefined ? undefined : Math.round((Date.now() - t.runningSince) / 1000),
        ...definedOnly(own),
      };
    });
  }

  /** The component's logger is named after it here, once, so no component names its own. */
  private contextOf(c: Component): ComponentContext {
    return { log: componentLogger(this.log, c.name), statuses: () => this.status() };
  }

  private mark(c: Component, state: ComponentState, lastError?: string): void {
    const prev = this.tracked.get(c);
    this.tracked.set(c, {
      state,
      lastError,
      runningSince: state === 'running' ? (prev?.runningSince ?? Date.now()) : undefined,
    });
  }

  private async waitReady(c: Component): Promise<void> {
    if (!c.ready) return;
    const timeoutMs = c.readyTimeoutMs ?? this.readyTimeoutMs;
    // A ref'd timer, not AbortSignal.timeout(): that one is unref'd, and a start waiting on a
    // component that never answers would let the process exit with nothing said.
    const timeout = new AbortController();
    const timer = setTimeout(() => timeout.abort(new Error(`timed out after ${seconds(timeoutMs)}`)), timeoutMs);
    const signal = AbortSignal.any([timeout.signal, this.startAbort.signal, this.startFailed.signal]);
    const ready = c.ready(signal);
    try {
      await untilAborted(ready, signal);
    } catch (err) {
      if (!timeout.signal.aborted)
        throw new Error(`${c.name} failed to become ready: ${reasonOf(err)}`, { cause: err });
      // The component's own reason (its last probe error) says more than "timed out", if it gives one promptly.
      let reason: string | undefined;
      await settlesWithin(
        ready.catch((e: unknown) => {
          reason = reasonOf(e);
        }),
        1000,
      );
      throw new Error(`${c.name} did not become ready within ${seconds(timeoutMs)}${reason ? `: ${reason}` : ''}`, {
        cause: err,
      });
    } finally {
      clearTimeout(timer);
    }
  }

  /** One stop sequence at a time: stop() during a failing start() joins the same sequence. */
  private stopStarted(): Promise<void> {
    this.stopping ??= (async () => {
      // In reverse list order, whatever order they started in (startAfter).
      const index = (c: Component) => this.components.indexOf(c);
      this.started.sort((a, b) => index(a) - index(b));
      for (let c = this.started.pop(); c !== undefined; c = this.started.pop()) {
        const before = this.tracked.get(c);
        this.log.info({ name: c.name }, `stopping ${c.name}`);
        this.onProgress(`stopping ${c.name}`);
        this.mark(c, 'stopping');
        const inStart = this.inStart.get(c);
        if (inStart && !(await settlesWithin(inStart, START_SETTLE_MS)))
          this.log.warn(
            { name: c.name },
            `${c.name} is still starting after ${seconds(START_SETTLE_MS)}; stopping it anyway`,
          );
        try {
          await c.stop?.();
          // A component that failed keeps saying why after its stop.
          if (before?.state === 'failed') this.mark(c, 'failed', before.lastError);
          else this.mark(c, 'stopped');
        } catch (err) {
          this.mark(c, 'failed', `failed to stop: ${reasonOf(err)}`);
          this.log.error({ name: c.name }, `${c.name} failed to stop: ${reasonOf(err)}`);
        }
      }
    })().finally(() => {
      this.stopping = undefined;
    });
    return this.stopping;
  }

  private throwIfStopping(): void {
    if (this.startAbort.signal.aborted) throw new Error('start cancelled: stopping');
  }
}

function round1(n: number): number {
  return Math.round(n * 10) / 10;
}

function seconds(ms: number): string {
  return `${round1(ms / 1000)}s`;
}
