// Handing a role over to a new kctl executable (an upgrade), with a way back. The old process has
// stopped its components and swapped the executable in place; it now starts the new one with the
// same arguments as its own child and waits until it says it is ready. If it never does (it
// exits, or the bound passes), the old process stops it and reports why: the caller puts the
// previous executable back and starts it again in place of itself (restartInPlace), so a build
// that cannot even start its JavaScript still rolls back. If it does:
//   - under systemd, the unit's main PID moves to the new process (MAINPID=) and the old one
//     exits; systemd watches the new one from then on, as if it had started it;
//   - otherwise the old process stays as a small parent of the new one: it passes SIGTERM and
//     SIGINT on and ends with its exit code, so whoever started kctl still holds one process.
import { spawn, type ChildProcess } from 'node:child_process';
import { chmod, copyFile, rename, rm } from 'node:fs/promises';
import { constants } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { messageOf } from '../base/errors.ts';
import type { Logger } from '../base/log.ts';

/** An upgrade's restart, as a component asks the role for it. */
export interface PendingRestart {
  /** The executable the user runs (KCTL_EXECUTABLE): replaced by `next`, put back from `previous` on a rollback. */
  installed: string;
  next: string;
  previous: string;
  /** The version `next` runs. */
  target: string;
  /** How long the new process has to be ready. */
  timeoutMs: number;
}

/** A component's request that the role stop and restart into a new executable (once per process). */
export class RestartRequest {
  pending: PendingRestart | undefined;
  private resolve: (why: string) => void = () => undefined;
  /** Resolves with the reason once a restart is asked for: the role's stop trigger. */
  readonly requested = new Promise<string>((resolve) => (this.resolve = resolve));

  request(r: PendingRestart, why: string): void {
    if (this.pending) return;
    this.pending = r;
    this.resolve(why);
  }
}

export interface HandoverOptions {
  /** The executable to start (already in place). */
  executable: string;
  args: readonly string[];
  /** Resolves once the new process is ready at the new version (polls until `signal` aborts). */
  ready: (signal: AbortSignal) => Promise<void>;
  timeoutMs: number;
  /** How long the new process may take to stop when it is sent back, before SIGKILL. */
  stopTimeoutMs?: number;
  log: Logger;
  /** Set under systemd: tells it the new main PID. */
  systemd?: { mainPid(pid: number): Promise<void> };
}

export type HandoverResult = { ok: true; child: ChildProcess } | { ok: false; reason: string };

/** The environment for the new process: the watchdog belongs to whichever process runs the role. */
function childEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  delete env.WATCHDOG_PID;
  return env;
}

/** Starts the new process and waits for it to be ready; stops it again when it is not. */
export async function handOver(o: HandoverOptions): Promise<HandoverResult> {
  o.log.info({ executable: o.executable, timeoutS: Math.round(o.timeoutMs / 1000) }, 'starting the new kctl');
  const child = spawn(o.executable, [...o.args], { stdio: 'inherit', env: childEnv() });
  const abort = new AbortController();
  const exited = new Promise<string>((resolve) => {
    child.once('error', (err) => resolve(`it could not start: ${err.message}`));
    child.once('exit', (code, signal) => resolve(`it exited (${signal ?? `code ${code}`}) before it was ready`));
  });
  let lastReason = 'not checked yet';
  const TIMEOUT = 'timeout';
  const readied = o.ready(abort.signal).then(
    () => null,
    (err: unknown) => {
      lastReason = messageOf(err);
      return abort.signal.aborted ? TIMEOUT : `its readiness check failed: ${lastReason}`;
    },
  );
  const timedOut = sleep(o.timeoutMs, undefined, { signal: abort.signal }).then(
    () => TIMEOUT,
    () => TIMEOUT,
  );
  let outcome = await Promise.race([readied, exited, timedOut]);
  abort.abort();
  if (outcome === TIMEOUT) {
    await readied;
    outcome = `it was not ready within ${Math.round(o.timeoutMs / 1000)} s (${lastReason})`;
  }
  if (outcome === null) {
    o.log.info({ pid: child.pid }, 'the new kctl is ready');
    await o.systemd?.mainPid(child.pid!);
    return { ok: true, child };
  }
  o.log.error({ reason: outcome }, 'the new kctl did not become ready; stopping it');
  await stopChild(child, o.stopTimeoutMs ?? 120_000);
  return { ok: false, reason: outcome };
}

async function stopChild(child: ChildProcess, timeoutMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  if (await Promise.race([gone.then(() => true), sleep(timeoutMs).then(() => false)])) return;
  child.kill('SIGKILL');
  await gone;
}

/** Without systemd: stay the new process's parent, pass signals on, end as it ends. */
export async function parentUntilExit(child: ChildProcess): Promise<never> {
  const pass = (signal: NodeJS.Signals) => child.kill(signal);
  for (const s of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(s, pass);
  // A child killed by a signal ends this process as a shell reports it: 128 + the signal's number.
  const code = await new Promise<number>((resolve) =>
    child.once('exit', (c, signal) => resolve(c ?? (signal ? 128 + (constants.signals[signal] ?? 15) : 1))),
  );
  process.exit(code);
}

/** Puts `source` at `installed` atomically (a copy beside it, renamed over it), mode 0755. */
export async function installExecutable(source: string, installed: string): Promise<void> {
  const tmp = `${installed}.kctl-upgrade.${process.pid}.tmp`;
  try {
    await copyFile(source, tmp);
    await chmod(tmp, 0o755);
    await rename(tmp, installed);
  } catch (err) {
    await rm(tmp, { force: true });
    throw new Error(`cannot put ${source} in place of ${installed}: ${messageOf(err)}`, { cause: err });
  }
}

/** Replaces this process with `executable` (same PID: systemd and a parent see one process). */
export function restartInPlace(executable: string, args: readonly string[]): never {
  // A kctl executable's runtime has it (Node 24); a checkout run on an older Node has not.
  if (typeof process.execve !== 'function')
    throw new Error('this Node runtime cannot replace its process (process.execve); restart kctl by hand');
  process.execve(executable, [executable, ...args], process.env);
  throw new Error(`${executable} did not start in place of this process`);
}

export interface UpgradeRestartOptions {
  log: Logger;
  /** Resolves once the new process is ready at `p.target`. */
  ready: (signal: AbortSignal) => Promise<void>;
  /** Under systemd (NOTIFY_SOCKET): moves the main PID, and pings the watchdog meanwhile. */
  systemd?: { mainPid(pid: number): Promise<void>; startWatchdog(): void; close(): Promise<void> };
  /** After a failed handover, before the previous executable starts again: record why. */
  onRollback: (reason: string) => Promise<void>;
}

/**
 * The role's restart for an upgrade, once its components stopped: the new executable in place,
 * handed over to, and either kept (this process exits or stays its parent) or replaced again by
 * the previous one, started in place of this process. Returns never.
 */
export async function restartForUpgrade(p: PendingRestart, o: UpgradeRestartOptions): Promise<never> {
  const args = process.argv.slice(2);
  o.systemd?.startWatchdog();
  await installExecutable(p.next, p.installed);
  const r = await handOver({
    executable: p.installed,
    args,
    ready: o.ready,
    timeoutMs: p.timeoutMs,
    log: o.log,
    systemd: o.systemd,
  });
  if (r.ok) {
    if (!o.systemd) return parentUntilExit(r.child);
    await o.systemd.close();
    process.exit(0);
  }
  await installExecutable(p.previous, p.installed);
  await o.onRollback(r.reason);
  await o.systemd?.close();
  o.log.warn({ executable: p.installed }, 'starting the previous kctl again');
  return restartInPlace(p.installed, args);
}
