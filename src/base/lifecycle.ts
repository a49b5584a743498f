// The one place kctl's long-running commands handle signals: start every component, run until
// SIGTERM or SIGINT, then stop them in reverse. A signal during start stops what already
// started and ends cleanly; a failed start stops what started and rethrows. Once everything is
// ready, the heap memory the start freed goes back to the system (memory.ts).
import type { Logger } from './log.ts';
import type { ComponentManager } from './manager.ts';
import { trimFreedMemory } from './memory.ts';

export interface RunOptions {
  /** Called once every component is ready (e.g. to log "controller ready" or notify systemd). */
  onReady?: () => void | Promise<void>;
  /** Called when a signal starts the stop (e.g. to tell systemd). */
  onStopping?: () => void;
  /** Called after every component stopped, whatever the reason. */
  onStopped?: () => void | Promise<void>;
  signals?: readonly NodeJS.Signals[];
}

/** Resolves after a signal stopped everything; rejects when the start failed. */
export async function runUntilSignal(manager: ComponentManager, log: Logger, opts: RunOptions = {}): Promise<void> {
  const signals = opts.signals ?? ['SIGTERM', 'SIGINT'];
  let stopping: Promise<void> | undefined;
  let onSignalled: () => void = () => undefined;
  const signalled = new Promise<void>((resolve) => {
    onSignalled = resolve;
  });
  const handler = (signal: NodeJS.Signals): void => {
    if (stopping) return;
    log.info({ signal }, `received ${signal}, stopping`);
    opts.onStopping?.();
    stopping = manager.stop();
    onSignalled();
  };
  for (const s of signals) process.on(s, handler);
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
    stopTrimming = trimFreedMemory(log);
    await signalled;
    await stopping;
  } finally {
    clearInterval(keepAlive);
    stopTrimming();
    for (const s of signals) process.off(s, handler);
    await opts.onStopped?.();
  }
}
