// Pid files and the processes they name: is it alive, is it really ours, make it go away.
// A pid file outlives the kctl that wrote it, and pids are reused, so nothing is killed
// unless /proc says it runs our binary.
import { readFile, readlink, realpath, rename, rm, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../base/log.ts';
import { errnoOf } from '../base/errors.ts';

const POLL_MS = 25;

export async function readPidFile(path: string): Promise<number | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if (errnoOf(err) === 'ENOENT') return undefined;
    throw err;
  }
  const pid = Number.parseInt(text.trim(), 10);
  return Number.isSafeInteger(pid) && pid > 1 && String(pid) === text.trim() ? pid : undefined;
}

/** Written atomically so a reader never sees a half-written pid. */
export async function writePidFile(path: string, pid: number): Promise<void> {
  const tmp = `${path}.${process.pid}.tmp`;
  await writeFile(tmp, `${pid}\n`, { mode: 0o644 });
  await rename(tmp, path);
}

export async function removePidFile(path: string): Promise<void> {
  await rm(path, { force: true });
}

/**
 * The fields of a /proc/PID/stat line from field 3 (state) on: the command name before them, in
 * parentheses, may hold spaces and ')', so they are counted from the last ')'. Field N is [N - 3].
 */
export function statFields(stat: string): string[] {
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/** Alive and not a zombie (a zombie has exited; it only waits for its parent to reap it). */
export async function processAlive(pid: number): Promise<boolean> {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if (errnoOf(err) !== 'EPERM') return false;
  }
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    const state = statFields(stat)[0];
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

/** True when `pid` runs `binary`: by /proc/<pid>/exe (a replaced binary reads "<path> (deleted)") or argv[0]. */
export async function runsBinary(pid: number, binary: string): Promise<boolean> {
  const wanted = new Set([binary]);
  try {
    wanted.add(await realpath(binary));
  } catch {
    // binary gone (e.g. replaced by an upgrade): compare with the path as given
  }
  try {
    const exe = (await readlink(`/proc/${pid}/exe`)).replace(/ \(deleted\)$/, '');
    if (wanted.has(exe)) return true;
  } catch {
    // exited, a zombie, or not ours to inspect
  }
  try {
    const argv0 = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0')[0];
    return argv0 !== undefined && wanted.has(argv0);
  } catch {
    return false;
  }
}

/** Polls until `pid` is gone or `timeoutMs` passes; true when gone. */
export async function waitForPidExit(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (!(await processAlive(pid))) return true;
    if (Date.now() >= deadline) return false;
    await sleep(POLL_MS);
  }
}

/** SIGTERM, then SIGKILL after `timeoutMs`; rejects if the process survives SIGKILL for long. */
export async function terminatePid(pid: number, timeoutMs: number, log: Logger): Promise<void> {
  signalPid(pid, 'SIGTERM');
  if (await waitForPidExit(pid, timeoutMs)) return;
  log.warn({ pid }, `pid ${pid} still running ${timeoutMs}ms after SIGTERM, sending SIGKILL`);
  signalPid(pid, 'SIGKILL');
  if (!(await waitForPidExit(pid, 5000))) throw new Error(`pid ${pid} survived SIGKILL (stuck in the kernel?)`);
}

function signalPid(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch (err) {
    if (errnoOf(err) !== 'ESRCH') throw err;
  }
}

/**
 * Deals with the pid file a previous kctl left behind: a live process running `binary` is
 * terminated; anything else (dead pid, reused pid, garbage) only loses its pid file.
 */
export async function cleanupStalePidFile(
  path: string,
  binary: string,
  stopTimeoutMs: number,
  log: Logger,
): Promise<void> {
  const pid = await readPidFile(path);
  if (pid === undefined) {
    await removePidFile(path);
    return;
  }
  if (!(await processAlive(pid))) {
    log.info({ pid, pidFile: path }, `removing stale pid file: pid ${pid} is not running`);
  } else if (await runsBinary(pid, binary)) {
    log.warn({ pid, pidFile: path }, `stopping leftover ${binary} (pid ${pid}) from a previous run`);
    await terminatePid(pid, stopTimeoutMs, log);
  } else {
    log.warn({ pid, pidFile: path }, `removing stale pid file: pid ${pid} is another program, leaving it alone`);
  }
  await removePidFile(path);
}
