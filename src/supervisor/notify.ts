// Talking to systemd when kctl runs under a Type=notify unit (kctl install): STATUS= lines while
// components come up (shown by `systemctl status`), READY=1 once the role really works, STOPPING=1,
// and WATCHDOG=1 pings from the event loop, so a hung kctl is restarted.
//
// Node has no datagram unix sockets, so each message is sent by `systemd-notify` (part of systemd,
// so present wherever the unit runs), spawned directly by kctl: systemd-notify sends with its
// parent's pid as the sender, so the message counts as the main process's even after the helper
// exited. One helper runs at a time, and it carries everything waiting when it starts: only the
// newest STATUS= and one WATCHDOG=1, so a burst of progress lines while components start (a
// spawn can take a second on a loaded host) never holds a ping back past the watchdog's limit.
import { spawn } from 'node:child_process';
import type { Logger } from '../base/log.ts';

/** Pings this late, or helpers this slow, are logged: half the watchdog's shortest useful interval. */
const LATE_MS = 2_000;

export interface NotifyOptions {
  /** The environment systemd gave the service (NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID). */
  env?: NodeJS.ProcessEnv;
  /** Default: systemd-notify from PATH. */
  command?: string;
  log: Logger;
}

export class SystemdNotifier {
  private queue: Promise<void> = Promise.resolve();
  /** Lines not sent yet, in order; the next helper takes them all. */
  private pending: string[] = [];
  private draining = false;
  private watchdog: NodeJS.Timeout | undefined;
  private readonly command: string;
  private readonly log: Logger;
  private failedOnce = false;

  private constructor(
    private readonly env: NodeJS.ProcessEnv,
    o: NotifyOptions,
  ) {
    this.command = o.command ?? 'systemd-notify';
    this.log = o.log;
  }

  /** A notifier when systemd asked for notifications (NOTIFY_SOCKET set), else undefined. */
  static fromEnv(o: NotifyOptions): SystemdNotifier | undefined {
    const env = o.env ?? process.env;
    return env.NOTIFY_SOCKET ? new SystemdNotifier(env, o) : undefined;
  }

  /**
   * The notifier of a role's process, its watchdog fed from now on: made first thing, since
   * systemd's watchdog runs from the exec on, through the host checks and a worker's join.
   */
  static forRole(o: NotifyOptions): SystemdNotifier | undefined {
    const n = SystemdNotifier.fromEnv(o);
    n?.startWatchdog();
    return n;
  }

  /** One line of progress for `systemctl status` (newlines would end the message). */
  status(text: string): void {
    this.send(`STATUS=${text.replace(/\s+/g, ' ').slice(0, 200)}`);
  }

  ready(status: string): void {
    this.send('READY=1', `STATUS=${status}`);
  }

  /** The unit's main process is now `pid` (an upgrade handed the role to it); resolves once systemd has it. */
  async mainPid(pid: number): Promise<void> {
    this.send(`MAINPID=${pid}`);
    await this.queue;
  }

  stopping(): void {
    this.send('STOPPING=1', 'STATUS=stopping');
  }

  /**
   * Pings now, then at half the interval systemd set (WATCHDOG_USEC), from a timer on the event
   * loop: a loop that stops turning stops the pings. The first ping is not left to the timer: the
   * interval runs from the exec, and a start under load spends seconds before this is called.
   * Does nothing without a watchdog for this process.
   */
  startWatchdog(): void {
    const usec = Number(this.env.WATCHDOG_USEC);
    const pid = this.env.WATCHDOG_PID;
    if (!Number.isFinite(usec) || usec <= 0 || (pid !== undefined && Number(pid) !== process.pid)) return;
    const everyMs = Math.max(Math.floor(usec / 1000 / 2), 100);
    this.send('WATCHDOG=1');
    let last = Date.now();
    this.watchdog = setInterval(() => {
      // A late ping says why systemd may kill kctl: the journal shows it before the watchdog's line.
      const late = Date.now() - last - everyMs;
      last = Date.now();
      if (late > LATE_MS) this.log.warn({ lateMs: late }, 'a watchdog ping ran late: the event loop was blocked');
      this.send('WATCHDOG=1');
    }, everyMs);
    this.watchdog.unref();
    this.log.info({ intervalMs: everyMs }, 'pinging the systemd watchdog');
    // Test hook (the watchdog e2e test): this signal blocks the event loop for good, as a hang would.
    const hang = this.env.KCTL_TEST_HANG_ON_SIGNAL as NodeJS.Signals | undefined;
    if (hang) {
      process.on(hang, () => {
        this.log.warn({ signal: hang }, 'blocking the event loop (KCTL_TEST_HANG_ON_SIGNAL)');
        for (;;) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1000);
      });
    }
  }

  /** No more pings, and every message queued so far handed to systemd: the last step of a stop. */
  async close(): Promise<void> {
    clearInterval(this.watchdog);
    this.watchdog = undefined;
    await this.queue;
  }

  private send(...lines: string[]): void {
    for (const line of lines) {
      const key = line.slice(0, line.indexOf('=') + 1);
      // Only the newest status matters, and one ping stands for any number of them.
      if (key === 'STATUS=' || key === 'WATCHDOG=') this.pending = this.pending.filter((p) => !p.startsWith(key));
      this.pending.push(line);
    }
    if (this.draining) return;
    this.draining = true;
    this.queue = this.queue.then(async () => {
      while (this.pending.length > 0) await this.run(this.pending.splice(0));
      this.draining = false;
    });
  }

  private run(lines: string[]): Promise<void> {
    const started = Date.now();
    return new Promise((resolve) => {
      // No shell: systemd-notify must be kctl's own child, so its parent pid is kctl's.
      const child = spawn(this.command, lines, { stdio: ['ignore', 'ignore', 'pipe'], env: this.env });
      let err = '';
      child.stderr.on('data', (c: Buffer) => (err += c.toString()));
      const done = (why?: string): void => {
        const tookMs = Date.now() - started;
        if (tookMs > LATE_MS) this.log.warn({ tookMs, message: lines[0] }, `${this.command} took long to deliver`);
        if (why && !this.failedOnce) {
          this.failedOnce = true; // once: a ping every few seconds must not flood the log
          this.log.warn({ message: lines[0] }, `cannot notify systemd: ${why}`);
        }
        resolve();
      };
      child.once('error', (e) => done(e.message));
      child.once('exit', (code) => done(code === 0 ? undefined : `${this.command} exited ${code}: ${err.trim()}`));
    });
  }
}
