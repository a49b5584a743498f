// Helpers for supervisor tests: bounded polling and cleanup of processes the test made.
import { spawn, type SpawnOptions } from 'node:child_process';
import { once } from 'node:events';

type AfterHook = { after: (fn: () => Promise<void> | void) => void };

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
export async function spawnProcess(
  t: AfterHook,
  file: string,
  args: string[],
  opts: SpawnOptions = {},
): Promise<number> {
  const child = spawn(file, args, { stdio: 'ignore', ...opts });
  await once(child, 'spawn');
  killAfter(t, child.pid);
  return child.pid as number;
}
