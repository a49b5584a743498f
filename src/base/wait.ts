// Waiting with a bound: on an AbortSignal, or on a timer that never holds the process open.
import { setTimeout as sleep } from 'node:timers/promises';

/** Settles with `p`, or rejects with the signal's reason once it aborts, even if `p` ignores the signal. */
export function untilAborted<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    p.catch(() => undefined);
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** True if `p` settles (either way) within `ms`; the timer is cleared either way. */
export async function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  const timer = new AbortController();
  try {
    return await Promise.race([
      p.then(
        () => true,
        () => true,
      ),
      sleep(ms, false, { signal: timer.signal }),
    ]);
  } finally {
    timer.abort();
  }
}

/**
 * Calls `done` until it returns true (then true), `everyMs` apart; once `timeoutMs` have passed
 * since the first call, a false answer ends it with false. An error of `done` goes to the caller.
 */
export async function pollFor(timeoutMs: number, everyMs: number, done: () => Promise<boolean>): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > deadline) return false;
    await sleep(everyMs);
  }
  return true;
}

/** pollFor, where running out of time is an error: what `onTimeout` makes (it may name what is still missing). */
export async function pollWithin(
  timeoutMs: number,
  everyMs: number,
  done: () => Promise<boolean>,
  onTimeout: () => Error,
): Promise<void> {
  if (!(await pollFor(timeoutMs, everyMs, done))) throw onTimeout();
}
