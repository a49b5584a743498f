// Supervises one child process (k0s pkg/supervisor): clean environment, output into the
// structured log, restart with capped exponential backoff, pid file, stale-child cleanup,
// SIGTERM-then-SIGKILL stop, and no orphan when kctl dies.
//
// node:child_process rather than execa: a supervisor needs the raw 'exit' event of a long-lived
// child; execa's run-to-completion promise waits for stdio to close, which a grandchild that
// inherited the pipe can delay forever.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { constants as fsConstants, existsSync } from 'node:fs';
import { access, mkdir } from 'node:fs/promises';
import { isAbsolute, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../base/log.ts';
import type { Component, ComponentContext, ComponentState, ComponentStatus, Restartable } from '../base/component.ts';
import { LineSplitter, parseChildLine, secretForms } from './output.ts';
import { cleanupStalePidFile, removePidFile, writePidFile } from './pidfile.ts';
import { settlesWithin, untilAborted } from '../base/wait.ts';
import { reasonOf } from '../base/errors.ts';
import { bindConflict, busyPortReason } from './port-holders.ts';
import { CHILD_PATH, SETPRIV, SUPERVISOR_DEFAULTS, type BackoffOptions, type SupervisorOptions } from './options.ts';

/** One spawned child, from spawn to exit. */
interface Run {
  child: ChildProcess;
  pid: number;
  startedAt: number;
  /** Resolves when the process has exited (not necessarily its stdio closed). */
  exited: Promise<ExitStatus>;
  /** Set the moment the process exits. */
  exit?: ExitStatus;
  lastStderr?: string;
  /** The address a Go program said it could not listen on ("bind: address already in use"). */
  busyAddress?: { address: string; port: number };
  planned?: boolean; // stopped by restart(): started again at once
}

interface ExitStatus {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export class Supervisor implements Component, Restartable {
  readonly name: string;
  readonly readyTimeoutMs?: number;
  readonly pidFile: string;

  private readonly opts: SupervisorOptions;
  private contextLog: Logger | undefined;
  private readonly stopTimeoutMs: number;
  private readonly backoff: BackoffOptions;
  private state: ComponentState = 'pending';
  private run?: Run;
  private restarts = 0;
  private lastError?: string;
  private nextDelayMs: number;
  private restartTimer?: NodeJS.Timeout;
  /** Set by stop(); an exit after this is expected and never restarts. */
  private stopRequested = false;
  private starting?: Promise<void>;
  private spawning?: Promise<void>;
  private stopping?: Promise<void>;
  private usePdeathsig?: boolean;
  /** Wakes ready() waiters on every state change. */
  private stateWaiters = new Set<() => void>();

  constructor(opts: SupervisorOptions) {
    if (!isAbsolute(opts.binary)) throw new Error(`${opts.name}: binary must be an absolute path, got ${opts.binary}`);
    this.opts = opts;
    this.name = opts.name;
    this.readyTimeoutMs = opts.readyTimeoutMs;
    this.pidFile = join(opts.runDir, `${opts.name}.pid`);
    this.stopTimeoutMs = opts.stopTimeoutMs ?? SUPERVISOR_DEFAULTS.stopTimeoutMs;
    this.backoff = opts.backoff ?? SUPERVISOR_DEFAULTS.backoff;
    this.nextDelayMs = this.backoff.initialMs;
  }

  /** The manager's logger for this component, or the one given outside a manager. */
  protected get log(): Logger {
    const log = this.opts.log ?? this.contextLog;
    if (!log) throw new Error(`${this.name}: no logger; run it under a component manager (init) or pass log`);
    return log;
  }

  /** Also run again by start() without a context: the manager's logger stays. */
  async init(ctx?: ComponentContext): Promise<void> {
    if (ctx) this.contextLog = ctx.log;
    await mkdir(this.opts.runDir, { recursive: true, mode: 0o755 });
  }

  /** Spawns the child; resolves once it runs (not necessarily ready). A no-op while already running. */
  async start(): Promise<void> {
    if (this.state === 'stopping') await this.stopping;
    if (this.state === 'starting' || this.state === 'running' || this.state === 'restarting') return this.starting;
    // A fresh life: reset synchronously so a stop() from here on belongs to this one.
    this.stopRequested = false;
    this.stopping = undefined;
    this.restarts = 0;
    this.lastError = undefined;
    this.nextDelayMs = this.backoff.initialMs;
    this.setState('starting');
    this.starting = this.doStart();
    return this.starting;
  }

  /** Resolves when the process runs and (if given) the readiness probe passes; rejects with the reason once `signal` aborts. */
  async ready(signal: AbortSignal): Promise<void> {
    const retryMs = this.opts.readyRetryMs ?? SUPERVISOR_DEFAULTS.readyRetryMs;
    let probeError: string | undefined;
    for (;;) {
      if (this.stopRequested || this.state === 'stopped') throw new Error('stopped before it became ready');
      if (signal.aborted) throw new Error(this.notReadyReason(probeError));
      if (this.state === 'running') {
        if (!this.opts.ready) return;
        const attempt = this.opts.ready(signal);
        try {
          await untilAborted(attempt, signal);
          return;
        } catch (err) {
          if (!signal.aborted) probeError = reasonOf(err);
          // Aborted: the probe's own last reason beats ours, if it gives one promptly.
          else
            await settlesWithin(
              attempt.catch((e: unknown) => {
                probeError = reasonOf(e);
              }),
              1000,
            );
        }
        await sleep(retryMs, undefined, { signal }).catch(() => undefined);
      } else {
        await this.nextStateChange(signal);
      }
    }
  }

  /** A planned restart (new credentials read only at start): SIGTERM, started again at once, counted in `restarts`. */
  async restart(reason: string): Promise<void> {
    const run = this.run;
    if (this.stopRequested || this.state !== 'running' || !run || run.exit) return;
    run.planned = true;
    this.log.info({ pid: run.pid, reason }, `restarting ${this.name}: ${reason}`);
    await this.terminate(run);
  }

  /** SIGTERM, SIGKILL after stopTimeoutMs, pid file removed; never restarts afterwards. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= this.doStop();
    return this.stopping;
  }

  status(): ComponentStatus {
    const s: ComponentStatus = { name: this.name, state: this.state, restarts: this.restarts };
    if (this.run && this.state === 'running') {
      s.pid = this.run.pid;
      s.uptimeSeconds = Math.floor((Date.now() - this.run.startedAt) / 1000);
    }
    if (this.lastError !== undefined) s.lastError = this.lastError;
    return s;
  }

  private async doStart(): Promise<void> {
    try {
      await access(this.opts.binary, fsConstants.X_OK).catch(() => {
        throw new Error(`${this.opts.binary} is missing or not executable`);
      });
      await this.init();
      await cleanupStalePidFile(this.pidFile, this.opts.binary, this.stopTimeoutMs, this.log);
      if (this.stopRequested) throw new Error('stopped while starting');
      await this.spawnTracked();
    } catch (err) {
      // The reason only: the component manager says which component failed.
      this.lastError = reasonOf(err);
      this.setState('failed');
      throw new Error(this.lastError, { cause: err });
    }
  }

  private async doStop(): Promise<void> {
    this.stopRequested = true;
    clearTimeout(this.restartTimer);
    this.restartTimer = undefined;
    await this.starting?.catch(() => undefined);
    await this.spawning?.catch(() => undefined);
    const run = this.run;
    if (run) {
      this.setState('stopping');
      await this.terminate(run);
    }
    await removePidFile(this.pidFile);
    this.setState('stopped');
    this.log.info(`${this.name} stopped`);
  }

  private async terminate(run: Run): Promise<void> {
    if (run.exit) return;
    run.child.kill('SIGTERM');
    if (await settlesWithin(run.exited, this.stopTimeoutMs)) return;
    this.log.warn(
      { pid: run.pid },
      `${this.name} (pid ${run.pid}) still running ${this.stopTimeoutMs}ms after SIGTERM, sending SIGKILL`,
    );
    run.child.kill('SIGKILL');
    await run.exited;
  }

  private spawnTracked(): Promise<void> {
    const p = this.spawnChild();
    this.spawning = p;
    return p.finally(() => {
      if (this.spawning === p) this.spawning = undefined;
    });
  }

  private async spawnChild(): Promise<void> {
    const { binary, args } = this.opts;
    if (this.usePdeathsig === undefined) {
      this.usePdeathsig = existsSync(SETPRIV);
      if (!this.usePdeathsig) this.log.warn(`${SETPRIV} not found: ${this.name} may outlive kctl if kctl is killed`);
    }
    // Plain exec after prctl: no fork, so the pid we track is the real child's.
    const [file, argv] = this.usePdeathsig
      ? [SETPRIV, ['--pdeathsig', 'SIGKILL', '--', binary, ...args]]
      : [binary, args];
    // A child takes the umask it is forked with, and spawn() forks before it returns: kctl's own
    // is swapped for the child's for that moment only.
    const umask = this.opts.umask === undefined ? undefined : process.umask(this.opts.umask);
    let child: ChildProcess;
    try {
      child = spawn(file, argv, {
        env: { PATH: CHILD_PATH, ...this.opts.env },
        cwd: this.opts.cwd,
        stdio: ['ignore', 'pipe', 'pipe'],
        // Own session: a Ctrl-C on kctl's terminal must not reach children at once;
        // kctl stops them itself, in reverse start order.
        detached: true,
      });
    } finally {
      if (umask !== undefined) process.umask(umask);
    }
    const exited = new Promise<ExitStatus>((resolve) => {
      child.once('exit', (code, signal) => resolve({ code, signal }));
    });
    try {
      await once(child, 'spawn'); // rejects with the spawn error (e.g. EACCES)
    } catch (err) {
      throw new Error(`cannot run ${file}: ${reasonOf(err)}`, { cause: err });
    }
    const pid = child.pid as number;
    child.on('error', (err) => this.log.error({ pid }, `${this.name}: ${reasonOf(err)}`));
    const run: Run = { child, pid, startedAt: Date.now(), exited };
    this.run = run;
    this.forwardOutput(run);
    void exited.then((how) => this.onExit(run, how));
    await writePidFile(this.pidFile, pid);
    this.log.info({ pid }, `${this.name} started (pid ${pid})`);
    // It may already have exited (onExit then owns the state).
    if (this.run === run && !run.exit && !this.stopRequested) this.setState('running');
  }

  private forwardOutput(run: Run): void {
    const max = this.opts.maxLineLength;
    const secrets = secretForms(this.opts.secrets ?? []);
    for (const stream of ['stdout', 'stderr'] as const) {
      const source = run.child[stream];
      if (!source) continue;
      const splitter = new LineSplitter((raw, truncated) => {
        const line = secrets.reduce((l, secret) => l.replaceAll(secret, '***'), raw);
        if (stream === 'stderr') run.lastStderr = line;
        run.busyAddress = bindConflict(line) ?? run.busyAddress;
        const { level, msg, fields } = parseChildLine(line);
        if (!this.log.isLevelEnabled(level)) return;
        const obj: Record<string, unknown> = {};
        if (fields) obj.fields = fields;
        if (truncated) obj.truncated = true;
        this.log[level](obj, msg);
      }, max);
      source.on('data', (chunk: Buffer) => splitter.push(chunk));
      source.on('end', () => splitter.end());
    }
  }

  private async onExit(run: Run, how: ExitStatus): Promise<void> {
    run.exit = how;
    const ranMs = Date.now() - run.startedAt;
    const exit = how.signal ? `killed by ${how.signal}` : `exited with code ${how.code}`;
    if (this.stopRequested) {
      this.log.info({ pid: run.pid, code: how.code, signal: how.signal }, `${this.name} ${exit}`);
      return;
    }
    if (this.run === run) this.run = undefined;
    this.setState('restarting');
    // stdio may still hold the last lines (and lastStderr) after 'exit'; give it a moment.
    await settlesWithin(once(run.child, 'close'), 200);
    await removePidFile(this.pidFile).catch(() => undefined);
    if (this.stopRequested) return;
    if (run.planned) return this.scheduleRestart(0);
    const why = run.busyAddress ? await busyPortReason(run.busyAddress) : run.lastStderr?.slice(0, 300);
    this.lastError = why ? `${exit}: ${why}` : exit;
    if (this.stopRequested) return;
    if (ranMs >= this.backoff.resetAfterMs) this.nextDelayMs = this.backoff.initialMs;
    const delayMs = this.nextDelayMs;
    this.nextDelayMs = Math.min(delayMs * 2, this.backoff.maxMs);
    // A taken port is not the child's fault and will not heal by itself: said at error level, with the holder.
    const [level, what] = run.busyAddress ? (['error', this.lastError] as const) : (['warn', exit] as const);
    const fields = { pid: run.pid, code: how.code, signal: how.signal, delayMs, restarts: this.restarts };
    this.log[level](fields, `${this.name} ${what}, restarting in ${formatMs(delayMs)}`);
    this.scheduleRestart(delayMs);
  }

  private scheduleRestart(delayMs: number): void {
    this.restartTimer = setTimeout(() => {
      this.restartTimer = undefined;
      if (this.stopRequested) return;
      this.restarts++;
      this.spawnTracked().catch((err: unknown) => {
        if (this.stopRequested) return;
        this.lastError = reasonOf(err);
        const next = this.nextDelayMs;
        this.nextDelayMs = Math.min(next * 2, this.backoff.maxMs);
        this.log.error({ delayMs: next }, `${this.name}: ${this.lastError}, retrying in ${formatMs(next)}`);
        this.scheduleRestart(next);
      });
    }, delayMs);
  }

  private setState(state: ComponentState): void {
    this.state = state;
    for (const wake of this.stateWaiters) wake();
    this.stateWaiters.clear();
  }

  private nextStateChange(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        signal.removeEventListener('abort', done);
        this.stateWaiters.delete(done);
        resolve();
      };
      this.stateWaiters.add(done);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  private notReadyReason(probeError: string | undefined): string {
    const parts: string[] = [];
    if (probeError) parts.push(`last probe error: ${probeError}`);
    else if (this.state !== 'running') parts.push(`process is ${this.state}`);
    else parts.push('readiness probe did not answer');
    if (this.restarts > 0 || this.state === 'restarting')
      parts.push(`${this.restarts} restarts, last: ${this.lastError ?? 'unknown'}`);
    return parts.join('; ');
  }
}

function formatMs(ms: number): string {
  return ms < 1000 ? `${ms}ms` : `${(ms / 1000).toFixed(ms % 1000 === 0 ? 0 : 1)}s`;
}
