// Helpers for supervisor tests: bounded polling and cleanup of processes the test made.
import { spawn, type SpawnOptions } from 'node:child_process';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { processAlive } from '../../../src/supervisor/pidfile.ts';

type AfterHook = { after: (fn: () => Promise<void> | void) => void };

/** Polls `check` until it returns a truthy value; fails the test with `what` after `timeoutMs`. */
export async function waitFor<T>(what: string, check: () => T | Promise<T>, timeoutMs = 5000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v) return v as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}`);
    await sleep(20);
  }
}

/** Kills `pid` (if still alive) when the test ends, pass or fail. */
export function killAfter(t: AfterHook, pid: number | undefined): void {
  if (pid === undefined) return;
  t.after(() => {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  });
}

/** A process the test starts itself (a "leftover" or a foreign program), killed when the test ends. */
export async function spawnProcess(t: AfterHook, file: string, args: string[], opts: SpawnOptions = {}): Promise<number> {
  const child = spawn(file, args, { stdio: 'ignore', ...opts });
  await once(child, 'spawn');
  killAfter(t, child.pid);
  return child.pid as number;
}

export async function isAlive(pid: number): Promise<boolean> {
  return processAlive(pid);
}
