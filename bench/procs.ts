// Child processes of the harness: started with their output kept for error messages, RSS read
// from /proc, stopped by their own pid.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readFileSync, readSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { stagedBinaryPids } from '../src/worker/reset.ts';
import type { WorkerPaths } from '../src/worker/paths.ts';

export interface Proc {
  name: string;
  child: ChildProcess;
  pid: number;
  output(): string;
  /** Lines on stdout, as they come. */
  onLine(fn: (line: string) => void): void;
  stop(): Promise<void>;
}

export function startProc(name: string, cmd: string, args: string[], env: NodeJS.ProcessEnv = {}): Proc {
  return procOf(name, spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } }));
}

/** A child already started (e.g. in a lab host, by `LabHost.spawn`) with its stdout and stderr piped. */
export function procOf(name: string, child: ChildProcess): Proc {
  let out = '';
  let buf = '';
  const listeners: ((l: string) => void)[] = [];
  child.stdout!.on('data', (c: Buffer) => {
    const s = c.toString();
    out = (out + s).slice(-20_000);
    buf += s;
    let i: number;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      for (const l of listeners) l(line);
    }
  });
  child.stderr!.on('data', (c: Buffer) => (out = (out + c.toString()).slice(-20_000)));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return {
    name,
    child,
    pid: child.pid!,
    output: () => out,
    onLine: (fn) => listeners.push(fn),
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(t);
    },
  };
}

/** The first stdout line that parses as JSON, e.g. a child's "ready" report. */
export function firstJsonLine<T>(p: Proc, timeoutMs = 60_000): Promise<T> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(
      () => reject(new Error(`${p.name}: no ready line within ${timeoutMs} ms\n${p.output()}`)),
      timeoutMs,
    );
    p.child.once('exit', (code) => reject(new Error(`${p.name} exited (${code}) before it was ready\n${p.output()}`)));
    p.onLine((l) => {
      if (!l.startsWith('{')) return;
      clearTimeout(t);
      resolve(JSON.parse(l) as T);
    });
  });
}

/** One `<field>: N kB` line of /proc/<pid>/status, KiB. */
function statusKiB(pid: number, field: 'VmRSS' | 'VmHWM' | 'RssAnon' | 'RssFile'): number {
  const m = new RegExp(`${field}:\\s+(\\d+)\\s+kB`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no ${field} for pid ${pid}`);
  return Number(m[1]);
}

/** Resident set size of one process, KiB. */
export function rssKiB(pid: number): number {
  return statusKiB(pid, 'VmRSS');
}

/** The highest resident set size of one process since it started (the kernel's own record), KiB. */
export function peakRssKiB(pid: number): number {
  return statusKiB(pid, 'VmHWM');
}

/** Whether a socket listens on 127.0.0.1:`port` (IPv4, this network namespace), from /proc/net/tcp: no connection made. */
export function listeningOnLoopback(port: number): boolean {
  const local = `0100007F:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  return readFileSync('/proc/net/tcp', 'utf8')
    .split('\n')
    .some((line) => {
      const f = line.trim().split(/\s+/);
      return f[1] === local && f[3] === '0A'; // 0A: LISTEN
    });
}

/** RSS split into anonymous (heaps: this process's own) and file-backed (mapped executable code, shared) KiB. */
export function rssSplitKiB(pid: number): { anon: number; file: number } {
  return { anon: statusKiB(pid, 'RssAnon'), file: statusKiB(pid, 'RssFile') };
}

/**
 * What a whole worker host holds in memory: the distinct physical pages resident in the kctl
 * worker process and in every process running a binary staged under its data dir (containerd,
 * its shims, kubelet, kube-proxy), the pods' own processes aside; KiB. Each page counts once,
 * however many of them map it (kubelet and kube-proxy run one multi-call file), and in full even
 * when a process outside the set maps it too (a controller on the same machine runs the same
 * runtime file): what the worker would hold on a host of its own. `parts` gives each program's
 * resident set, for the log. Needs root (page frame numbers in /proc/PID/pagemap).
 */
export function workerHostKiB(kctlPid: number, paths: WorkerPaths): { total: number; parts: Map<string, number> } {
  const pids = [kctlPid, ...stagedBinaryPids(paths)];
  const frames = new Set<number>();
  const parts = new Map<string, number>();
  for (const pid of pids) {
    const name = pid === kctlPid ? 'kctl' : readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
    parts.set(name, (parts.get(name) ?? 0) + rssKiB(pid));
    for (const f of residentFrames(pid)) frames.add(f);
  }
  return { total: frames.size * 4, parts };
}

/** The page frame numbers of one process's resident pages (4 KiB pages). */
function residentFrames(pid: number): number[] {
  const out: number[] = [];
  let fd: number;
  try {
    fd = openSync(`/proc/${pid}/pagemap`, 'r');
  } catch {
    return out;
  }
  try {
    for (const line of readFileSync(`/proc/${pid}/maps`, 'utf8').split('\n')) {
      const m = /^([0-9a-f]+)-([0-9a-f]+) /.exec(line);
      if (!m || line.endsWith('[vsyscall]')) continue;
      const [first, end] = [parseInt(m[1]!, 16) / 4096, parseInt(m[2]!, 16) / 4096];
      const buf = Buffer.alloc((end - first) * 8);
      readSync(fd, buf, 0, buf.length, first * 8);
      for (let i = 0; i < buf.length; i += 8) {
        const entry = buf.readBigUInt64LE(i);
        // Bit 63: present in RAM; bits 0-54: the page frame number.
        if (!(entry >> 63n)) continue;
        const frame = Number(entry & ((1n << 55n) - 1n));
        if (frame === 0) throw new Error('/proc/PID/pagemap shows no page frame numbers: the bench needs root');
        out.push(frame);
      }
    }
  } finally {
    closeSync(fd);
  }
  return out;
}

/** CPU time (user + system) a process has used so far, ms (from /proc/<pid>/stat, 10 ms ticks). */
export function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name, which may itself hold spaces and parentheses.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}

/** Polls `check` until it is true; fails at the timeout, or at once when one of `watch` has exited. */
export async function waitUntil(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
  detail = (): string => '',
  watch: Proc[] = [],
): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (
      await Promise.resolve()
        .then(check)
        .catch(() => false)
    )
      return;
    const dead = watch.find((p) => p.child.exitCode !== null || p.child.signalCode !== null);
    if (dead)
      throw new Error(
        `${dead.name} exited (${dead.child.exitCode ?? dead.child.signalCode}) while waiting for ${what}\n${detail()}`,
      );
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}\n${detail()}`);
    await sleep(100);
  }
}

/** Sum of the named gauges in a Prometheus text page (all label sets). */
export async function gauges(url: string, names: string[]): Promise<number> {
  return sumGauges(await (await fetch(url)).text(), names);
}

/** Sum of the named gauges in the text of a Prometheus page (all label sets). */
export function sumGauges(text: string, names: string[]): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (m && names.includes(m[1]!)) sum += Number(m[3]);
  }
  return sum;
}
