// Polling for an end-to-end condition: `check` until it is true (a throw counts as "not yet"),
// or a failure naming what was awaited plus whatever `log` shows (a process's last lines).
import { setTimeout as sleep } from 'node:timers/promises';

export async function waitFor(
  what: string,
  timeoutMs: number,
  check: () => Promise<boolean>,
  log?: () => string | Promise<string>,
  intervalMs = 500,
): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await check().catch(() => false)) return;
    await sleep(intervalMs);
  }
  throw new Error(`timed out waiting for ${what}${log ? `\n${await log()}` : ''}`);
}
