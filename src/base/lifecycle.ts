// The one place kctl's long-running commands handle signals: start every component, run until
// SIGTERM or SIGINT, then stop them in reverse. A signal during start stops what already
// started and ends cleanly; a failed start stops what started and rethrows. Once everything is
// ready, the heap memory the start freed goes back to the system (memory.ts).
// The drop-ins keep upstream's signal semantics through two options: `drain` (proxy-agent: the
// first signal drains, the second stops) and `signalWhileStopping` (proxy-server: a second
// signal exits 1 at once; proxy-agent: a third takes the signal's default action).
import type { Logger } from './log.ts';
import type { ComponentManager } from './manager.ts';
import { trimFreedMemory } from './memory.ts';

export interface RunOptions {
  /** Called once every component is ready (e.g. to log "controller ready" or notify systemd). */
  onReady?: () => void | Promise<void>;
  /** Called when a signal starts the stop (e.g. to tell systemd). */
  onStopping?: (signal: NodeJS.Signals) => void;
  /** Called after every component stopped, whatever the reason. */
  onStopped?: () => void | Promise<void>;
  signals?: readonly NodeJS.Signals[];
  /**
   * Set: the first signal once everything is ready runs this and keeps running; the next signal
   * stops. Unset: the first signal stops.
   */
  drain?: () => void | Promise<void>;
  /**
   * A signal once the stop began: 'ignore' (default; the stop finishes), 'default' (the signal's
   * own action: the handlers are gone), or exit at once with this code.
   */
  signalWhileStopping?: 'ignore' | 'default' | { exitCode: number };
  /** Stops everything as a signal would when it resolves (its value is logged): an upgrade's restart. */
  stopWhen?: Promise<string>;
}

/** Resolves after a signal stopped everything; rejects when the start failed. */
export async function runUntilSignal(manager: ComponentManager, log: Logger, opts: RunOptions = {}): Promise<void> {
  const signals = opts.signals ?? ['SIGTERM', 'SIGINT'];
  const whileStopping = opts.signalWhileStopping ?? 'ignore';
  let stopping: Promise<void> | undefined;
  let ready = false;
  let drained = false;
  let onSignalled: () => void = () => undefined;
  const signalled = new Promise<void>((resolve) => {
    onSignalled = resolve;
  });
  const handler = (signal: NodeJS.Signals): void => {
    if (stopping) {
      if (typeof whileStopping === 'object') process.exit(whileStopping.exitCode);
      return;
    }
    if (opts.drain && ready && !drained) {
      drained = true;
      log.info({ signal }, `received ${signal}: draining; send it again to stop`);
      void opts.drain();
      return;
    }
    if (drained) log.info({ signal }, `received ${signal} again, stopping`);
    else if (typeof whileStopping === 'object')
      log.info({ signal }, `received ${signal}, stopping; send it again to exit at once`);
    else log.info({ signal }, `received ${signal}, stopping`);
    if (whileStopping === 'default') removeHandlers();
    opts.onStopping?.(signal);
    stopping = manager.stop();
    onSignalled();
  };
  const removeHandlers = (): void => {
    for (const s of signals) process.off(s, handler);
  };
  for (const s of signals) process.on(s, handler);
  void opts.stopWhen?.then((why) => {
    if (stopping) return;
    // Not onStopping: the role goes on (in a new process), so systemd must not hear STOPPING.
    log.info(`${why}: stopping`);
    stopping = manager.stop();
    onSignalled();
  });
  // Waiting for a signal must hold the process open even if no socket or child does.
  const keepAlive = setInterval(() => undefined, 1 << 30);
  let stopTrimming = (): void => undefined;
  try {
    try {
      await manager.start();
    } catch (err) {
      // A signal during start is a clean stop, not a failure.
      if (stopping) {
        await stopping;
        return;
      }
      throw err;
    }
    await opts.onReady?.();
    ready = true;
    stopTrimming = trimFreedMemory(log);
    await signalled;
    await stopping;
  } finally {
    clearInterval(keepAlive);
    stopTrimming();
    removeHandlers();
    await opts.onStopped?.();
  }
}
