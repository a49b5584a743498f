// What a supervised child is told: its program, environment, run dir, stop and restart timing,
// readiness. Its own file, beside process.ts, with every default in one object next to the type.
import type { Logger } from '../base/log.ts';

export const CHILD_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
/** util-linux; sets PR_SET_PDEATHSIG and execs, so the pid we track is the real child's. */
export const SETPRIV = '/usr/bin/setpriv';

export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
  /** A child that ran this long before exiting restarts after `initialMs` again. */
  resetAfterMs: number;
}

export interface SupervisorOptions {
  /** Component name: the program's name, its pid file's, and (by the manager) its logger's. */
  name: string;
  /** Absolute path. */
  binary: string;
  args: string[];
  /** The child gets only PATH (CHILD_PATH) plus these; nothing leaks from kctl's environment. */
  env?: Record<string, string>;
  cwd?: string;
  /** Pid file at <runDir>/<name>.pid. */
  runDir: string;
  /** Outside a component manager (tests, fixtures): the logger, used as given. Under one, the manager's at init. */
  log?: Logger;
  /** SIGTERM, then SIGKILL after this long. Default 10 s. */
  stopTimeoutMs?: number;
  /** Default 1 s, doubling, capped at 30 s, reset after 60 s of healthy running. */
  backoff?: BackoffOptions;
  /** Readiness probe run by ready(); retried until it resolves or the signal aborts. */
  ready?: (signal: AbortSignal) => Promise<void>;
  /** Pause between failed readiness probes. Default 500 ms. */
  readyRetryMs?: number;
  /** How long the component manager waits for ready(). Default: the manager's. */
  readyTimeoutMs?: number;
  /** Longer output lines are truncated. Default 16 KiB. */
  maxLineLength?: number;
  /** The child's umask; default kctl's own (0077). */
  umask?: number;
  /** Strings (passwords) replaced by *** in every line of the child's output before it is logged. */
  secrets?: string[];
}

/** The supervisor's defaults, for every option that has one. */
export const SUPERVISOR_DEFAULTS = {
  stopTimeoutMs: 10_000,
  backoff: { initialMs: 1000, maxMs: 30_000, resetAfterMs: 60_000 } satisfies BackoffOptions,
  readyRetryMs: 500,
};
