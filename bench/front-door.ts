// The front-door section (`npm run bench -- --front-door`): what the door costs a TLS connection
// against the same connection straight to the server, in one run, alternating the two paths. The
// TLS server (front-door-backend.mjs) and the door (front-door-door.ts) each run in a process of
// their own; the client is this process. Rows:
//   front-door-connect-p50 / -p99  TCP connect + TLS handshake + one round trip, ms
//   front-door-throughput          one TLS connection, MiB/s (median of the runs)
//   front-door-cpu-per-mib         the door's own CPU per MiB passed, ms
//   front-door-memory-per-1000-idle  the door's RSS for 1,000 idle spliced connections, MiB
import { spawn } from 'node:child_process';
import { connect, type TLSSocket } from 'node:tls';
import type { BenchPki } from './pki.ts';
import { cpuMs, firstJsonLine, procOf, startProc, type Proc } from './procs.ts';
import { median, type Row } from './rows.ts';

export interface FrontDoorSizes {
  samples: number;
  tputBytes: number;
  tputRuns: number;
  idle: number;
}

const MiB = 1024 * 1024;

export const FRONT_DOOR_SIZES: Record<'full' | 'quick' | 'smoke', FrontDoorSizes> = {
  full: { samples: 2000, tputBytes: 256 * MiB, tputRuns: 5, idle: 1000 },
  quick: { samples: 500, tputBytes: 64 * MiB, tputRuns: 3, idle: 1000 },
  smoke: { samples: 50, tputBytes: 8 * MiB, tputRuns: 1, idle: 100 },
};

type Path = 'door' | 'direct';

function open(port: number, ca: string): Promise<TLSSocket> {
  return new Promise((resolve, reject) => {
    // The server's certificate names localhost: the door routes by it, the client checks it.
    const s = connect({ host: '127.0.0.1', port, servername: 'localhost', ca });
    s.once('secureConnect', () => resolve(s));
    s.once('error', reject);
  });
}

/** Connect, handshake and one byte there and back, ms. */
async function connectOnce(port: number, ca: string): Promise<number> {
  const start = performance.now();
  const s = await open(port, ca);
  s.setNoDelay(true);
  await new Promise<void>((resolve, reject) => {
    s.once('data', () => resolve());
    s.once('error', reject);
    s.write('p');
  });
  const ms = performance.now() - start;
  s.destroy();
  return ms;
}

/** `bytes` through one connection, MiB/s from the first write to the server's count. */
async function throughput(port: number, ca: string, bytes: number): Promise<number> {
  const s = await open(port, ca);
  const chunk = Buffer.alloc(256 * 1024, 0x73);
  const start = performance.now();
  const answer = new Promise<string>((resolve, reject) => {
    let text = '';
    s.on('data', (d: Buffer) => (text += d.toString()));
    s.once('end', () => resolve(text.trim()));
    s.once('error', reject);
  });
  let left = bytes;
  while (left > 0) {
    const n = Math.min(left, chunk.length);
    left -= n;
    if (!s.write(n === chunk.length ? chunk : chunk.subarray(0, n))) await new Promise((r) => s.once('drain', r));
  }
  s.end();
  const got = Number(await answer);
  if (got !== bytes) throw new Error(`the server counted ${got} of ${bytes} bytes`);
  return bytes / MiB / ((performance.now() - start) / 1000);
}

const percentile = (xs: number[], p: number): number => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) * p)]!;

export async function frontDoorFigures(o: {
  pki: BenchPki;
  sizes: FrontDoorSizes;
  log: (line: string) => void;
}): Promise<Row[]> {
  const ca = await import('node:fs/promises').then((fs) => fs.readFile(o.pki.ca, 'utf8'));
  const procs: Proc[] = [];
  try {
    const backend = startProc('front-door backend', process.execPath, [
      new URL('front-door-backend.mjs', import.meta.url).pathname,
      o.pki.serverCert,
      o.pki.serverKey,
    ]);
    procs.push(backend);
    const server = (await firstJsonLine<{ port: number }>(backend)).port;
    const doorChild = spawn(
      process.execPath,
      ['--expose-gc', '--import', 'tsx', new URL('front-door-door.ts', import.meta.url).pathname, String(server)],
      { stdio: ['pipe', 'pipe', 'pipe'] },
    );
    const door = procOf('front door', doorChild);
    procs.push(door);
    const doorPort = (await firstJsonLine<{ port: number }>(door)).port;
    const port: Record<Path, number> = { door: doorPort, direct: server };
    const paths: Path[] = ['direct', 'door'];

    // First, on the fresh door: traffic before would leave freed memory in its RSS.
    o.log(`front door: memory with ${o.sizes.idle} idle connections`);
    const ask = (): Promise<{ rssKiB: number; open: number }> =>
      new Promise((resolve) => {
        door.onLine((l) => l.startsWith('{"rssKiB"') && resolve(JSON.parse(l) as { rssKiB: number; open: number }));
        doorChild.stdin!.write('rss\n');
      });
    const before = await ask();
    const idle: TLSSocket[] = [];
    for (let i = 0; i < o.sizes.idle; i++) idle.push(await open(doorPort, ca));
    let after = await ask();
    for (let i = 0; i < 50 && after.open < o.sizes.idle; i++) after = await ask();
    if (after.open < o.sizes.idle) throw new Error(`the door holds ${after.open} of ${o.sizes.idle} idle connections`);
    for (const s of idle) s.destroy();
    const perThousand = ((after.rssKiB - before.rssKiB) / 1024) * (1000 / o.sizes.idle);

    o.log(`front door: ${o.sizes.samples} connections per path, alternating`);
    const ms: Record<Path, number[]> = { door: [], direct: [] };
    for (let i = 0; i < o.sizes.samples; i++)
      for (const p of i % 2 ? paths : [...paths].reverse()) ms[p].push(await connectOnce(port[p], ca));

    o.log(`front door: ${o.sizes.tputRuns} x ${o.sizes.tputBytes / MiB} MiB per path, alternating`);
    const tput: Record<Path, number[]> = { door: [], direct: [] };
    // The door's own CPU per MiB it passes (the server's and client's TLS are not its cost).
    const doorCpu: number[] = [];
    for (let i = 0; i < o.sizes.tputRuns; i++)
      for (const p of i % 2 ? paths : [...paths].reverse()) {
        const before = cpuMs(door.pid);
        tput[p].push(await throughput(port[p], ca, o.sizes.tputBytes));
        if (p === 'door') doorCpu.push((cpuMs(door.pid) - before) / (o.sizes.tputBytes / MiB));
      }

    const range = (xs: number[]): [number, number] => [Math.min(...xs), Math.max(...xs)];
    return [
      {
        scenario: 'front-door-connect-p50',
        unit: 'ms',
        kctl: percentile(ms.door, 0.5),
        upstream: null,
        direct: percentile(ms.direct, 0.5),
        note: `TCP connect, TLS handshake (server name localhost) and one round trip, ${o.sizes.samples} per path, alternating; kctl = through the door, direct = to the server's port`,
      },
      {
        scenario: 'front-door-connect-p99',
        unit: 'ms',
        kctl: percentile(ms.door, 0.99),
        upstream: null,
        direct: percentile(ms.direct, 0.99),
      },
      {
        scenario: 'front-door-throughput',
        unit: 'MiB/s',
        kctl: median(tput.door),
        upstream: null,
        direct: median(tput.direct),
        range: { kctl: range(tput.door), direct: range(tput.direct) },
        note: `one TLS connection, ${o.sizes.tputBytes / MiB} MiB, median of ${o.sizes.tputRuns} runs per path, alternating`,
      },
      {
        scenario: 'front-door-cpu-per-mib',
        unit: 'ms',
        kctl: median(doorCpu),
        upstream: null,
        direct: null,
        range: { kctl: range(doorCpu) },
        note: "the door process's CPU time (user + system) per MiB it passed in the throughput runs; what the door itself costs, whoever else shares the cores",
      },
      {
        scenario: 'front-door-memory-per-1000-idle',
        unit: 'MiB',
        kctl: perThousand,
        upstream: null,
        direct: null,
        note: `the door process's RSS (after a full GC) with ${o.sizes.idle} idle spliced connections against none, per 1,000`,
      },
    ];
  } finally {
    for (const p of procs) await p.stop();
  }
}
