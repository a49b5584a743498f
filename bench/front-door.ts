// The front-door section (`npm run bench -- --front-door`): what the door costs a TLS connection
// against the same connection straight to the server, and against HAProxy routing by server name
// the same way (the upstream column, front-door-haproxy.ts), in one run, rotating the three paths.
// The TLS server (front-door-backend.mjs), the door (front-door-door.ts) and HAProxy each run in a
// process of their own; the client is this process. Rows:
//   front-door-connect-p50 / -p99  TCP connect + TLS handshake + one round trip, ms
//   front-door-throughput          one TLS connection, MiB/s (median of the runs)
//   front-door-cpu-per-mib         the router's own CPU per MiB passed, ms
//   front-door-memory-per-1000-idle  the router's RSS for 1,000 idle connections, MiB
import { spawn } from 'node:child_process';
import { connect, type TLSSocket } from 'node:tls';
import { KCTL_NODE_FLAGS } from '../assets/runtime-flags.ts';
import { startHaproxy } from './front-door-haproxy.ts';
import type { BenchPki } from './pki.ts';
import { cpuMs, firstJsonLine, procOf, rssKiB, startProc, type Proc } from './procs.ts';
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

type Path = 'door' | 'upstream' | 'direct';

/** The paths in turn `i`: each goes first, second and last equally often. */
const rotation = (paths: Path[], i: number): Path[] => paths.map((_, k) => paths[(i + k) % paths.length]!);

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
      [
        ...KCTL_NODE_FLAGS,
        '--expose-gc',
        '--import',
        'tsx',
        new URL('front-door-door.ts', import.meta.url).pathname,
        String(server),
      ],
      { stdio: ['pipe', 'pipe', 'pipe'] },
    );
    const door = procOf('front door', doorChild);
    procs.push(door);
    const doorPort = (await firstJsonLine<{ port: number }>(door)).port;
    const haproxy = await startHaproxy(server);
    procs.push({ ...haproxy.proc, stop: haproxy.stop });
    const port: Record<Path, number> = { door: doorPort, upstream: haproxy.port, direct: server };
    const pid: Record<'door' | 'upstream', number> = { door: door.pid, upstream: haproxy.proc.pid };
    const paths: Path[] = ['direct', 'door', 'upstream'];

    // First, on the fresh routers: traffic before would leave freed memory in their RSS.
    o.log(`front door: memory with ${o.sizes.idle} idle connections`);
    const ask = (): Promise<{ rssKiB: number; open: number }> =>
      new Promise((resolve) => {
        door.onLine((l) => l.startsWith('{"rssKiB"') && resolve(JSON.parse(l) as { rssKiB: number; open: number }));
        doorChild.stdin!.write('rss\n');
      });
    const idleMiB = async (p: 'door' | 'upstream'): Promise<number> => {
      const rss = async (): Promise<number> => (p === 'door' ? (await ask()).rssKiB : rssKiB(pid[p]));
      const before = await rss();
      // Handshaken through the router: it holds both sides of every one.
      const idle: TLSSocket[] = [];
      for (let i = 0; i < o.sizes.idle; i++) idle.push(await open(port[p], ca));
      if (p === 'door') {
        let held = (await ask()).open;
        for (let i = 0; i < 50 && held < o.sizes.idle; i++) held = (await ask()).open;
        if (held < o.sizes.idle) throw new Error(`the door holds ${held} of ${o.sizes.idle} idle connections`);
      }
      const after = await rss();
      for (const s of idle) s.destroy();
      return ((after - before) / 1024) * (1000 / o.sizes.idle);
    };
    const perThousand = { door: await idleMiB('door'), upstream: await idleMiB('upstream') };

    o.log(`front door: ${o.sizes.samples} connections per path, rotating`);
    const ms: Record<Path, number[]> = { door: [], upstream: [], direct: [] };
    for (let i = 0; i < o.sizes.samples; i++)
      for (const p of rotation(paths, i)) ms[p].push(await connectOnce(port[p], ca));

    o.log(`front door: ${o.sizes.tputRuns} x ${o.sizes.tputBytes / MiB} MiB per path, rotating`);
    const tput: Record<Path, number[]> = { door: [], upstream: [], direct: [] };
    // Each router's own CPU per MiB it passes (the server's and client's TLS are not its cost).
    const cpu: Record<'door' | 'upstream', number[]> = { door: [], upstream: [] };
    for (let i = 0; i < o.sizes.tputRuns; i++)
      for (const p of rotation(paths, i)) {
        const before = p === 'direct' ? 0 : cpuMs(pid[p]);
        tput[p].push(await throughput(port[p], ca, o.sizes.tputBytes));
        if (p !== 'direct') cpu[p].push((cpuMs(pid[p]) - before) / (o.sizes.tputBytes / MiB));
      }

    const range = (xs: number[]): [number, number] => [Math.min(...xs), Math.max(...xs)];
    return [
      {
        scenario: 'front-door-connect-p50',
        unit: 'ms',
        kctl: percentile(ms.door, 0.5),
        upstream: percentile(ms.upstream, 0.5),
        direct: percentile(ms.direct, 0.5),
        note: `TCP connect, TLS handshake (server name localhost) and one round trip, ${o.sizes.samples} per path, rotating; kctl = through the door, upstream = through HAProxy routing by server name, direct = to the server's port`,
      },
      {
        scenario: 'front-door-connect-p99',
        unit: 'ms',
        kctl: percentile(ms.door, 0.99),
        upstream: percentile(ms.upstream, 0.99),
        direct: percentile(ms.direct, 0.99),
      },
      {
        scenario: 'front-door-throughput',
        unit: 'MiB/s',
        kctl: median(tput.door),
        upstream: median(tput.upstream),
        direct: median(tput.direct),
        range: { kctl: range(tput.door), upstream: range(tput.upstream), direct: range(tput.direct) },
        note: `one TLS connection, ${o.sizes.tputBytes / MiB} MiB, median of ${o.sizes.tputRuns} runs per path, rotating`,
      },
      {
        scenario: 'front-door-cpu-per-mib',
        unit: 'ms',
        kctl: median(cpu.door),
        upstream: median(cpu.upstream),
        direct: null,
        range: { kctl: range(cpu.door), upstream: range(cpu.upstream) },
        note: "the router process's CPU time (user + system) per MiB it passed in the throughput runs; what the router itself costs, whoever else shares the cores",
      },
      {
        scenario: 'front-door-memory-per-1000-idle',
        unit: 'MiB',
        kctl: perThousand.door,
        upstream: perThousand.upstream,
        direct: null,
        note: `the router process's RSS (the door's after a full GC) with ${o.sizes.idle} idle handshaken connections through it against none, per 1,000`,
      },
    ];
  } finally {
    for (const p of procs) await p.stop();
  }
}
