// The tunnel scenarios run with the TypeScript driver (driver.ts): idle memory, leak residual,
// head-of-line blocking. Each measures one path and returns one number; run.ts alternates the
// paths and takes medians. Throughput and dial latency run the Go driver (go-driver.ts).
import { setMaxListeners } from 'node:events';
import type { Duplex } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Dialer } from './driver.ts';
import { rssKiB } from './procs.ts';
import type { Stack } from './stacks.ts';

export interface Targets {
  /** "<n>\n" in, n bytes out, then close. */
  source: string;
  echo: string;
  /** A port nobody listens on. */
  refused: string;
}

const MiB = 1024 * 1024;
const FOREVER = 2 ** 40;

/** Sends the source request and counts what comes back until `bytes` arrived (or the stream ends). */
function download(s: Duplex, bytes: number, onBytes?: (n: number) => void): Promise<number> {
  return new Promise((resolve) => {
    let got = 0;
    const done = (): void => {
      s.off('data', onData);
      resolve(got);
    };
    const onData = (c: Buffer): void => {
      got += c.length;
      onBytes?.(c.length);
      if (got >= bytes) done();
    };
    s.on('data', onData);
    s.once('end', done);
    s.once('close', done);
    s.on('error', () => {});
    s.resume();
    s.write(`${bytes}\n`);
  });
}

/** Echo round trip of `size` bytes. */
function roundTrip(s: Duplex, size: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let got = 0;
    const onData = (c: Buffer): void => {
      got += c.length;
      if (got >= size) {
        s.off('data', onData);
        s.pause();
        resolve();
      }
    };
    s.on('data', onData);
    const early = (): void => (got < size ? reject(new Error(`echo ended after ${got} of ${size} bytes`)) : undefined);
    s.once('end', early);
    s.once('close', early);
    s.on('error', reject);
    s.resume();
    s.write(Buffer.alloc(size, 0x61));
  });
}

/** Ends a connection the way a client closes (CLOSE_REQ / FIN), destroying it if the peer never confirms. */
function close(s: Duplex): void {
  s.on('error', () => {});
  s.end();
  setTimeout(() => s.destroy(), 5_000).unref();
}

/** KiB of server+agent RSS per idle open connection, with `n` open. */
export async function idleMemoryPerConn(stack: Stack, d: Dialer, t: Targets, n: number): Promise<number> {
  const rss = (): number => stack.pids.reduce((sum, pid) => sum + rssKiB(pid), 0);
  for (let i = 0; i < 20; i++) {
    const s = await d.dial(t.echo);
    await roundTrip(s, 16);
    close(s);
  }
  await sleep(1_000);
  const before = rss();
  const open: Duplex[] = [];
  for (let i = 0; i < n; i += 50) {
    const batch = await Promise.all(Array.from({ length: Math.min(50, n - i) }, () => d.dial(t.echo)));
    await Promise.all(batch.map((s) => roundTrip(s, 16)));
    open.push(...batch);
  }
  await sleep(2_000);
  const after = rss();
  for (const s of open) s.destroy();
  return (after - before) / n;
}

/** Entries left in the server and agent tables after `cycles` dial/close cycles with faults mixed in. */
export interface LeakResult {
  /** Table entries still there after the load settled. */
  residual: number;
  /** Cycles that made no progress for 3 s and were cut off by the driver (each destroyed). */
  stuck: number;
  /** Stuck cycles by kind. */
  stuckKinds: Record<string, number>;
}

/** Entries left in the server and agent tables after `cycles` dial/close cycles with faults mixed in. */
export async function leakResidual(stack: Stack, d: Dialer, t: Targets, cycles: number): Promise<LeakResult> {
  let stuck = 0;
  const stuckKinds: Record<string, number> = {};
  const KINDS = ['ok', 'ok', 'ok', 'ok', 'ok', 'ok', 'refused', 'cancel', 'client-vanishes', 'target-closes'];
  const cycle = async (i: number): Promise<void> => {
    let s: Duplex | undefined;
    const kind = i % 10;
    const ac = new AbortController();
    const op = (async () => {
      if (kind === 6) {
        await d.dial(t.refused, ac.signal).then(
          (x) => x.destroy(),
          () => {},
        ); // agent's dial fails
      } else if (kind === 7) {
        setTimeout(() => ac.abort(), Math.random() * 2); // client gives up while the dial is pending
        s = await d.dial(t.echo, ac.signal);
        s.destroy();
      } else if (kind === 8) {
        s = await d.dial(t.source, ac.signal); // client vanishes mid-transfer
        const conn = s;
        await new Promise<void>((r) => {
          conn.once('data', () => r());
          conn.once('close', () => r());
          conn.on('error', () => r());
          conn.resume();
          conn.write(`${16 * MiB}\n`);
        });
        conn.destroy();
      } else if (kind === 9) {
        s = await d.dial(t.source, ac.signal); // target closes first
        await download(s, 4096);
        close(s);
      } else {
        s = await d.dial(t.echo, ac.signal);
        await roundTrip(s, 1024);
        close(s);
      }
    })().catch(() => {});
    let timer: NodeJS.Timeout | undefined;
    const cutOff = new Promise<'stuck'>((r) => (timer = setTimeout(() => r('stuck'), 3_000)));
    if ((await Promise.race([op, cutOff])) === 'stuck') {
      stuck++;
      stuckKinds[KINDS[kind]!] = (stuckKinds[KINDS[kind]!] ?? 0) + 1;
      ac.abort();
      s?.destroy();
    }
    clearTimeout(timer);
  };
  let next = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < cycles) await cycle(next++);
    }),
  );
  let left = await stack.tableEntries();
  const end = Date.now() + 20_000;
  while (left !== 0 && Date.now() < end) {
    await sleep(250);
    left = await stack.tableEntries();
  }
  return { residual: left, stuck, stuckKinds };
}

/**
 * Throughput of `conns` healthy downloads in a `windowMs` window while one other connection's
 * reader is stalled, divided by the same without the stall. The window starts at the dials,
 * so a tunnel that cannot even dial while stalled scores 0.
 */
export async function holOthersRatio(d: Dialer, t: Targets, conns: number, windowMs: number): Promise<number> {
  const healthyBytes = async (): Promise<number> => {
    let bytes = 0;
    const ac = new AbortController();
    setMaxListeners(0, ac.signal); // one signal cancels every pending dial of the window
    const socks: Duplex[] = [];
    const start = Date.now();
    const all = Promise.all(
      Array.from({ length: conns }, async () => {
        const s = await d.dial(t.source, ac.signal).catch(() => undefined);
        if (!s) return;
        socks.push(s);
        if (ac.signal.aborted) return;
        void download(s, FOREVER, (n) => {
          if (!ac.signal.aborted) bytes += n;
        });
      }),
    );
    await sleep(windowMs - (Date.now() - start));
    ac.abort();
    const counted = bytes;
    await all;
    for (const s of socks) s.destroy();
    return counted;
  };
  const without = await healthyBytes();
  await sleep(500);
  // Bounded: on a path whose agent stream a previous repetition's stalled reader still blocks
  // (upstream), even this dial never completes; nothing gets through then, so the ratio is 0.
  const stalled = await d.dial(t.source, AbortSignal.timeout(15_000)).catch(() => undefined);
  if (!stalled) return 0;
  stalled.on('error', () => {});
  stalled.write(`${FOREVER}\n`); // and never read
  await sleep(500);
  const withStall = await healthyBytes();
  stalled.destroy();
  return withStall / without;
}
