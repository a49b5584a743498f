// Polling for an end-to-end condition: `check` until it gives a truthy value (a throw counts as
// "not yet"), which is returned, or a failure naming what was awaited plus whatever `log` shows
// (a process's last lines). A check still pending when the time is up counts as "not yet".
import { setTimeout as sleep } from 'node:timers/promises';

export async function waitFor<T>(
  what: string,
  timeoutMs: number,
  check: () => Promise<T | false | undefined | null>,
  log?: () => string | Promise<string>,
  intervalMs = 500,
): Promise<T> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    // A check that never settles (a process that stopped answering) ends with the wait, not never.
    const v = await Promise.race([check().catch(() => undefined), sleep(Math.max(0, end - Date.now()), undefined, { ref: false })]);
    if (v) return v;
    await sleep(intervalMs);
  }
  throw new Error(`timed out waiting for ${what}${log ? `\n${await log()}` : ''}`);
}
