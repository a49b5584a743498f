// The Go client driver (bench/go-driver, built on the upstream konnectivity-client module) for
// the speed scenarios: built once per source content with the machine's Go toolchain into the
// cache (outside the checkout), then run once per measurement.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { cacheRoot } from '../src/payload/manifest.ts';

/**
 * How the driver reaches the target: GRPC or HTTP-CONNECT through the proxy's unix socket, or
 * TCP; or GRPC to a ProxyService inside the driver that echoes (floor.go), the client's own cost.
 */
export type GoPath = { mode: 'grpc' | 'connect'; uds: string } | { mode: 'direct' | 'floor' };

const SRC = new URL('go-driver/', import.meta.url).pathname;
const FILES = ['go.mod', 'go.sum', 'main.go', 'floor.go', 'cancel.go', 'probe.go', 'stalled.go'];
const run = promisify(execFile);
const log = (m: string): void => void process.stderr.write(`[bench] ${m}\n`);

/** What a failed child said: its last stderr line (the driver's one-line error), else its exit. */
function why(err: unknown): string {
  const e = err as { code?: unknown; stderr?: string; message: string };
  const lines = (e.stderr ?? '').trim().split('\n').filter(Boolean);
  return lines.at(-1)?.replace(/^go-driver: /, '') ?? (typeof e.code === 'number' ? `exit ${e.code}` : e.message);
}

let built: Promise<string> | undefined;

/** Path of the driver binary, building it first if this source was never built on this machine. */
export function goDriver(): Promise<string> {
  return (built ??= build());
}

async function build(): Promise<string> {
  const hash = createHash('sha256');
  for (const f of FILES)
    hash
      .update(`${f}\0`)
      .update(readFileSync(join(SRC, f)))
      .update('\0');
  const dir = join(cacheRoot(), 'bench');
  const bin = join(dir, `go-driver-${hash.digest('hex').slice(0, 16)}`);
  if (existsSync(bin)) return bin;
  mkdirSync(dir, { recursive: true });
  const tmp = `${bin}.${process.pid}.tmp`;
  log(`building the Go driver (go build in bench/go-driver; the first build downloads its Go modules) -> ${bin}`);
  const started = Date.now();
  try {
    await run('go', ['build', '-trimpath', '-buildvcs=false', '-mod=readonly', '-o', tmp, '.'], {
      cwd: SRC,
      maxBuffer: 16 << 20,
    });
  } catch (err) {
    rmSync(tmp, { force: true });
    if ((err as { code?: unknown }).code === 'ENOENT')
      throw new Error(
        'the Go toolchain (`go`) is not on PATH: the bench builds its Go client driver (bench/go-driver) with it',
        { cause: err },
      );
    const lines = ((err as { stderr?: string }).stderr ?? '')
      .split('\n')
      .filter((l) => l.trim() && !l.startsWith('go: downloading'));
    for (const l of lines) log(`go build: ${l}`);
    throw new Error(
      `go build of bench/go-driver failed: ${lines.find((l) => !l.startsWith('# '))?.trim() ?? why(err)}`,
      { cause: err },
    );
  }
  renameSync(tmp, bin);
  log(`Go driver built in ${((Date.now() - started) / 1000).toFixed(0)} s`);
  return bin;
}

function pathArgs(p: GoPath): string[] {
  return 'uds' in p ? ['--mode', p.mode, '--uds', p.uds] : ['--mode', p.mode];
}

/**
 * Runs the driver binary with its arguments and resolves to its stdout; on failure rejects with an
 * error carrying `stderr` (and `code`, the exit status). Here by default; the WAN figures run it
 * inside a lab host.
 */
export type Runner = (bin: string, args: string[]) => Promise<string>;

const here: Runner = async (bin, args) => (await run(bin, args, { maxBuffer: 64 << 20 })).stdout;

async function drive<T>(sub: string, p: GoPath, args: string[], runner = here): Promise<T> {
  const bin = await goDriver();
  try {
    return JSON.parse(await runner(bin, [sub, ...pathArgs(p), ...args])) as T;
  } catch (err) {
    throw new Error(`go-driver ${sub} (${p.mode}): ${why(err)}`, { cause: err });
  }
}

/** MiB/s in total for `conns` parallel downloads of `bytesEach` from `source`, timed from the requests to the last byte. */
export async function throughput(
  p: GoPath,
  source: string,
  conns: number,
  bytesEach: number,
  runner?: Runner,
): Promise<number> {
  return (
    await drive<{ mibps: number }>(
      'throughput',
      p,
      ['--source', source, '--conns', String(conns), '--bytes', String(bytesEach)],
      runner,
    )
  ).mibps;
}

/** Milliseconds for each of `count` sequential short connections to `echo`: dial, 1 KiB round trip, close. */
export async function dialLatencies(p: GoPath, echo: string, count: number, runner?: Runner): Promise<number[]> {
  return (await drive<{ ms: number[] }>('dial-latency', p, ['--echo', echo, '--count', String(count)], runner)).ms;
}

/** What a probe saw (go-driver/probe.go); times are wall-clock Unix ms. */
export interface ProbeResult {
  ok: boolean;
  tries: number;
  startedMs: number;
  /** The working try's echo back, or the last try's failure. */
  endedMs: number;
  /** The last failure, absent after a try that worked. */
  error?: string;
}

export interface ProbeOptions {
  /** Stop trying this long after the start. */
  giveUpMs: number;
  /** At most this long per try; default giveUpMs: one try. */
  tryTimeoutMs?: number;
  /** A new try this long after the last one started; default 250 ms. */
  everyMs?: number;
}

/** Dial and a 1 KiB echo through the path, tried until one works or the time is up. */
export function probe(p: GoPath, echo: string, o: ProbeOptions, runner?: Runner): Promise<ProbeResult> {
  const ms = (x: number): string => `${Math.round(x)}ms`;
  return drive<ProbeResult>(
    'probe',
    p,
    [
      '--echo',
      echo,
      '--give-up',
      ms(o.giveUpMs),
      '--try-timeout',
      ms(o.tryTimeoutMs ?? o.giveUpMs),
      '--every',
      ms(o.everyMs ?? 250),
    ],
    runner,
  );
}

/** A download beside streams nobody reads (go-driver/stalled.go): its rate counts what arrived within the give-up. */
export interface BesideStalled {
  mibps: number;
  complete: boolean;
  bytes: number;
}

/**
 * `stalled` connections ask `source` for data and are never read; after `fillMs`, one download of
 * `bytes` through the same path, given `giveUpMs`.
 */
export function besideStalled(
  p: GoPath,
  source: string,
  o: { stalled: number; fillMs: number; bytes: number; giveUpMs: number },
  runner?: Runner,
): Promise<BesideStalled> {
  const args = [
    '--source',
    source,
    '--stalled',
    String(o.stalled),
    '--fill',
    `${o.fillMs}ms`,
    '--bytes',
    String(o.bytes),
    '--give-up',
    `${o.giveUpMs}ms`,
  ];
  return drive<BesideStalled>('beside-stalled', p, args, runner);
}

/** What `http.Client.Do` returned in go-driver's `cancel` runs (go-driver/cancel.go). */
export interface CancelCounts {
  canceled: number;
  eof: number;
  answered: number;
  other: number;
  /** The tunnel's stream had already ended when Do returned. */
  tunnelEndedFirst: number;
  /** Each error text but "context canceled", with its count. */
  messages: Record<string, number>;
}

/**
 * `count` GET requests, each through a new single-use GRPC tunnel to a target in the driver that
 * answers right after the client canceled: in kube-apiserver's shape (the tunnel outlives the
 * request's context) or in upstream's test's (one context for both).
 */
export function cancelCounts(uds: string, count: number, shape: 'apiserver' | 'test'): Promise<CancelCounts> {
  return drive<CancelCounts>('cancel', { mode: 'grpc', uds }, ['--count', String(count), '--shape', shape]);
}
