// A WAN between one lab host (a worker) and its peers (the controller hosts): one-way delay with
// jitter, random loss, a bandwidth cap and silent partitions, switchable while a test runs.
// test/README.md ("WAN lab") has the picture; in short, in the switch namespace:
//
//   host i ── h<i> ── bw<i> ── wa<i> ⇄ kctl-wan ⇄ wb<i> ── br0 ── the other hosts
//
// kctl-wan (fixtures/wan/main.go) copies Ethernet frames between the two TAPs and impairs the
// IP frames whose far end is a peer; the host's traffic with other hosts passes untouched.
// Addresses never change and TCP stays end to end. Conventions: delay and jitter are one-way and
// apply in each direction (a ping's round trip crosses both: RTT = 2 × delay); loss is per
// direction (a ping is answered with chance (1 - loss)²); the rate caps each direction on its own.
// "up" is host → peers, "down" is peers → host.
import { type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { execa } from 'execa';
import { cacheRoot } from '../../../src/payload/manifest.ts';
import type { Lab, LabHost } from './lab.ts';

/** One direction of the link; what a profile or set() leaves out is perfect (0). */
export interface WanDirection {
  /** One-way propagation delay. */
  delayMs: number;
  /** Each frame's delay is delayMs ± up to this much (uniform); frames keep their order. */
  jitterMs: number;
  /** The chance, 0..1, that an IP frame is lost in this direction. */
  loss: number;
  /** The bandwidth cap in kbit/s of Ethernet frames; 0 is none. */
  rateKbit: number;
  /** The router's queue before the cap, in ms at the rate: what arrives beyond it is dropped (tail drop). */
  queueMs: number;
}

/** Partitions by themselves: each lasts durationMs and starts gapMs[0]..gapMs[1] (uniform, from the seed) after the last one healed. */
export interface PartitionSchedule {
  gapMs: readonly [number, number];
  durationMs: number;
}

/** Fields at the top apply to both directions; `up` and `down` override them for one. */
export interface WanParams extends Partial<WanDirection> {
  up?: Partial<WanDirection>;
  down?: Partial<WanDirection>;
  partitions?: PartitionSchedule;
}

export const WAN_PROFILES = {
  /** No impairment (frames still cross the emulator). */
  clean: {},
  /** A remote site: 75 ± 10 ms each way (RTT 150 ± 20 ms), 1 % loss each way, 20 Mbit/s each way. */
  edge: { delayMs: 75, jitterMs: 10, loss: 0.01, rateKbit: 20_000 },
  /** 300 ms each way (RTT 600 ms), 2 % loss each way, 5 Mbit/s each way. */
  satellite: { delayMs: 300, loss: 0.02, rateKbit: 5_000 },
  /** edge, plus a silent partition of 30 s every 120-240 s. */
  flaky: {
    delayMs: 75,
    jitterMs: 10,
    loss: 0.01,
    rateKbit: 20_000,
    partitions: { gapMs: [120_000, 240_000], durationMs: 30_000 },
  },
} satisfies Record<string, WanParams>;
export type WanProfile = keyof typeof WAN_PROFILES;

const DEFAULT_QUEUE_MS = 150;

export interface WanDirectionStats {
  /** Impaired frames delivered. */
  forwarded: number;
  /** Dropped by the random loss. */
  lost: number;
  /** Dropped silently because the link was partitioned. */
  partitionDropped: number;
  /** Dropped because the queue before the rate cap was full. */
  queueDropped: number;
  /** Frames not between the host and a peer (ARP, other hosts), copied untouched. */
  passed: number;
  /** Frames longer than MTU 1500 plus the Ethernet header: always 0 unless the TAP setup is wrong. */
  oversize: number;
  /** Bytes waiting for the rate cap now. */
  queueBytes: number;
  /** Frames held in the delay line now. */
  heldFrames: number;
}

export interface WanStats {
  up: WanDirectionStats;
  down: WanDirectionStats;
  partition: {
    on: boolean;
    /** Every partition so far (by hand or scheduled), oldest first, in epoch ms; endMs is null while it lasts. */
    windows: { startMs: number; endMs: number | null }[];
    /** When the schedule next starts or heals one (epoch ms), null without a schedule. */
    nextMs: number | null;
  };
}

export interface WanLink {
  readonly host: LabHost;
  /** The emulator's pid (in the lab's switch namespace). */
  readonly pid: number;
  /** Replaces every parameter: a profile, or parameters (what they leave out is perfect). */
  set(settings: WanProfile | WanParams): Promise<void>;
  /** Partitions the link by hand (on top of any schedule): IP frames both ways are dropped silently, ARP still passes. */
  partition(on: boolean): Promise<void>;
  stats(): Promise<WanStats>;
  /** Stops the emulator and puts the host back on the lab bridge, as it was. */
  close(): Promise<void>;
}

export interface WanOptions {
  /** The hosts (or addresses) at the far end of the WAN, e.g. the controller hosts. */
  peers: readonly (LabHost | string)[];
  profile?: WanProfile | WanParams;
  /** Seed of the loss, jitter and partition draws, so a run repeats. */
  seed?: number;
}

/** Puts `host` behind a WAN to `o.peers`; the lab's destroy() ends it if close() is never called. */
export async function wan(lab: Lab, host: LabHost, o: WanOptions): Promise<WanLink> {
  const bin = await wanBinary();
  const sw = lab.sw;
  const port = sw.port(host);
  const i = port.slice(1);
  const [a, b, bridge] = [`wa${i}`, `wb${i}`, `bw${i}`];
  const ip = async (...args: string[]) => {
    const r = await sw.run('ip', args);
    if (r.exitCode !== 0)
      throw new Error(`WAN for ${host.name}: ip ${args.join(' ')} failed: ${String(r.stderr).trim()}`);
  };
  if ((await sw.run('ip', ['link', 'show', bridge])).exitCode === 0)
    throw new Error(`${host.name} is already behind a WAN`);

  // The devices first and the host's port last, so the host is cut off only while it moves.
  await ip('tuntap', 'add', 'dev', a, 'mode', 'tap');
  await ip('tuntap', 'add', 'dev', b, 'mode', 'tap');
  await ip('link', 'add', bridge, 'type', 'bridge');
  await ip('link', 'set', a, 'master', bridge, 'up');
  await ip('link', 'set', b, 'master', 'br0', 'up');
  await ip('link', 'set', bridge, 'up');
  const peers = o.peers.map((p) => (typeof p === 'string' ? p : p.ip));
  const child = sw.spawn(bin, ['-a', a, '-b', b, '-peers', peers.join(','), '-seed', String(o.seed ?? 1)], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const link = new Link(host, child, `WAN emulator for ${host.name}`, () => sw.destroyed);
  const restore = async () => {
    await ip('link', 'set', port, 'nomaster');
    await ip('link', 'set', port, 'master', 'br0');
    for (const dev of [bridge, a, b]) await ip('link', 'del', dev);
  };
  try {
    await link.set(o.profile ?? 'clean');
    await ip('link', 'set', port, 'nomaster');
    await ip('link', 'set', port, 'master', bridge);
  } catch (err) {
    await link.close();
    await restore().catch(() => {});
    throw err;
  }
  link.onClose(restore);
  return link;
}

/** Resolves a profile or parameters into what kctl-wan's set command takes. */
function wanSettings(settings: WanProfile | WanParams): object {
  const p: WanParams = typeof settings === 'string' ? WAN_PROFILES[settings] : settings;
  const direction = (own: Partial<WanDirection> = {}): WanDirection => ({
    delayMs: own.delayMs ?? p.delayMs ?? 0,
    jitterMs: own.jitterMs ?? p.jitterMs ?? 0,
    loss: own.loss ?? p.loss ?? 0,
    rateKbit: own.rateKbit ?? p.rateKbit ?? 0,
    queueMs: own.queueMs ?? p.queueMs ?? DEFAULT_QUEUE_MS,
  });
  const s = p.partitions;
  return {
    up: direction(p.up),
    down: direction(p.down),
    ...(s && { partitions: { gapMinMs: s.gapMs[0], gapMaxMs: s.gapMs[1], durationMs: s.durationMs } }),
  };
}

/** The handle: one command line out, one answer line back, in order. */
class Link implements WanLink {
  private readonly waiting: { resolve: (line: string) => void; reject: (err: Error) => void }[] = [];
  private stderr = '';
  /** Set when the emulator is gone: every call after that fails with it. */
  private ended: Error | undefined;
  private closing = false;
  private restore: () => Promise<void> = async () => {};

  constructor(
    readonly host: LabHost,
    private readonly child: ChildProcess,
    private readonly what: string,
    /** True when the lab is being destroyed: the emulator's end is expected then. */
    private readonly tearingDown: () => boolean,
  ) {
    // A command written after the emulator died must not crash the test process (EPIPE).
    child.stdin!.on('error', () => {});
    createInterface({ input: child.stdout! }).on('line', (line) => this.waiting.shift()?.resolve(line));
    child.stderr!.on('data', (c: Buffer) => {
      this.stderr = (this.stderr + c.toString()).slice(-2000);
    });
    // 'close', not 'exit': its last stderr line (the reason) has been read by then.
    child.on('close', (code, signal) => {
      const said = this.stderr.trim().split('\n').at(-1) ?? '';
      this.ended = new Error(`${what} exited (${signal ?? `code ${code}`})${said ? `: ${said}` : ''}`);
      // Loud: the host is cut off from everything behind the WAN, and the test would only see timeouts.
      if (!this.closing && !tearingDown())
        process.stderr.write(`[wan] ${this.ended.message}; ${host.name} is cut off from its peers\n`);
      for (const w of this.waiting.splice(0)) w.reject(this.ended);
    });
  }

  get pid(): number {
    return this.child.pid ?? 0;
  }

  onClose(fn: () => Promise<void>): void {
    this.restore = fn;
  }

  private async call(command: object): Promise<Record<string, unknown>> {
    if (this.ended) throw this.ended;
    const line = new Promise<string>((resolve, reject) => this.waiting.push({ resolve, reject }));
    this.child.stdin!.write(JSON.stringify(command) + '\n');
    const answer = JSON.parse(await line) as { ok: boolean; error?: string } & Record<string, unknown>;
    if (!answer.ok) throw new Error(`${this.what}: ${answer.error}`);
    return answer;
  }

  async set(settings: WanProfile | WanParams): Promise<void> {
    await this.call({ cmd: 'set', ...wanSettings(settings) });
  }

  async partition(on: boolean): Promise<void> {
    await this.call({ cmd: 'partition', on });
  }

  async stats(): Promise<WanStats> {
    return (await this.call({ cmd: 'stats' })).stats as WanStats;
  }

  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    // The host back on br0 first, then the emulator, so the host is never cut off.
    await this.restore();
    if (!this.ended) {
      const exited = once(this.child, 'close');
      this.child.stdin!.end();
      const stuck = setTimeout(() => this.child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(stuck);
    }
  }
}

const SOURCE = new URL('./fixtures/wan/main.go', import.meta.url).pathname;
let built: Promise<string> | undefined;

/** kctl-wan, built once per source content with the machine's Go toolchain into the cache. */
function wanBinary(): Promise<string> {
  return (built ??= buildWan());
}

async function buildWan(): Promise<string> {
  const hash = createHash('sha256').update(readFileSync(SOURCE)).digest('hex').slice(0, 16);
  const dir = join(cacheRoot(), 'test-tools');
  const bin = join(dir, `kctl-wan-${hash}`);
  if (existsSync(bin)) return bin;
  mkdirSync(dir, { recursive: true });
  const tmp = `${bin}.${process.pid}.tmp`;
  const r = await execa('go', ['build', '-trimpath', '-ldflags', '-s -w', '-o', tmp, SOURCE], {
    env: { CGO_ENABLED: '0', GO111MODULE: 'off' },
    reject: false,
    all: true,
  });
  if (r.failed) {
    rmSync(tmp, { force: true });
    if (r.code === 'ENOENT')
      throw new Error(
        'the Go toolchain (`go`) is not on PATH: the WAN lab builds its emulator (test/e2e/lab/fixtures/wan) with it',
      );
    const first = String(r.all ?? '')
      .split('\n')
      .find((l) => l.trim() && !l.startsWith('# '));
    throw new Error(`go build of test/e2e/lab/fixtures/wan failed: ${first?.trim() ?? r.message}`);
  }
  renameSync(tmp, bin);
  return bin;
}
