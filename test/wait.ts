// Waiting for a condition, for every test and the bench: `check` until it gives a truthy value,
// which is returned, or a failure naming what was awaited, why the check last failed, and whatever
// `log` shows (a process's last lines). A check that throws, or is still pending when the time is
// up, counts as "not yet"; `stopIf` ends the wait at once with its reason (a process it needs exited).
import { setTimeout as sleep } from 'node:timers/promises';

export { processAlive as alive } from '../src/supervisor/pidfile.ts';

export interface WaitOptions {
  /** What to add to a failure: a process's last lines. */
  log?: () => string | Promise<string>;
  /** Between checks; by default a 200th of the time allowed, from 20 ms to 0.5 s. */
  intervalMs?: number;
  /** A reason to stop waiting now (a process the condition needs has exited), or nothing. */
  stopIf?: () => string | false | undefined | null;
}

export async function waitFor<T>(
  what: string,
  timeoutMs: number,
  check: () => T | false | undefined | null | Promise<T | false | undefined | null>,
  opts: WaitOptions | WaitOptions['log'] = {},
): Promise<T> {
  const o = typeof opts === 'function' ? { log: opts } : opts;
  const intervalMs = o.intervalMs ?? Math.min(500, Math.max(20, Math.floor(timeoutMs / 200)));
  const end = Date.now() + timeoutMs;
  let lastError: string | undefined;
  let stopped: string | undefined;
  for (;;) {
    // A check that never settles (a process that stopped answering) ends with the wait, not never.
    const v = await Promise.race([
      Promise.resolve()
        .then(check)
        .catch((err: unknown) => void (lastError = err instanceof Error ? err.message : String(err))),
      sleep(Math.max(0, end - Date.now()), undefined, { ref: false }),
    ]);
    if (v) return v as T;
    stopped = o.stopIf?.() || undefined;
    if (stopped || Date.now() >= end) break;
    await sleep(Math.min(intervalMs, Math.max(0, end - Date.now())));
  }
  const why = stopped
    ? `stopped waiting for ${what}: ${stopped}`
    : `timed out after ${timeoutMs} ms waiting for ${what}`;
  const log = o.log ? `\n${await o.log()}` : '';
  throw new Error(`${why}${lastError ? ` (the last check threw: ${lastError})` : ''}${log}`);
}
