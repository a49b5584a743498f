// For the standalone bench processes (kctl-server.ts, kctl-agent.ts): a "stats" line on stdin
// answers with one JSON line: memory, open file descriptors and the connection tables. "stats gc"
// first collects garbage (when the process runs with --expose-gc), so a leak check compares what
// is live rather than how much the heap happened to grow, and adds where the resident memory is
// (`memory`); plain "stats" is cheap enough to poll.
import { readFileSync, readdirSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { getHeapSpaceStatistics } from 'node:v8';

/** Where a process's memory is, in KiB: V8's view, then the kernel's (resident pages by mapping). */
export interface MemoryBreakdown {
  /** Pages V8 holds for its heap (used or not). */
  heapTotalKiB: number;
  /** Memory of C++ objects bound to JavaScript ones (buffers, TLS, zlib), as V8 is told of it. */
  externalKiB: number;
  arrayBuffersKiB: number;
  /** Committed bytes of V8's code space (compiled code) and of its large-object spaces. */
  codeSpaceKiB: number;
  largeObjectKiB: number;
  /** Resident in the brk heap: glibc's main malloc arena (OpenSSL, Node's C++ objects). */
  brkKiB: number;
  /** Resident in anonymous mappings: V8's heap pages, malloc's other arenas and its large blocks, thread stacks. */
  anonKiB: number;
  /** Resident in mapped files (the node binary, shared libraries). */
  fileKiB: number;
}

export interface ProcessStats {
  /** True when garbage was collected first ("stats gc" in a process run with --expose-gc). */
  gc: boolean;
  rssKiB: number;
  heapUsedKiB: number;
  fds: number;
  /** The process's own connection tables (server: agents, tunnels, pending dials; agent: servers, targets, dials). */
  tables: Record<string, number>;
  /** Only with "stats gc": reading /proc/self/smaps costs more than a poll should. */
  memory?: MemoryBreakdown;
}

/** Resident KiB of the brk heap, anonymous mappings and file mappings, from /proc/self/smaps. */
function residentByMapping(): { brkKiB: number; anonKiB: number; fileKiB: number } {
  const out = { brkKiB: 0, anonKiB: 0, fileKiB: 0 };
  let kind: keyof typeof out = 'anonKiB';
  for (const line of readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
    const header = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \d+\s*(.*)$/.exec(line);
    if (header) {
      const name = header[1]!;
      kind =
        name === '[heap]'
          ? 'brkKiB'
          : name === '' || name.startsWith('[anon') || name.startsWith('[stack')
            ? 'anonKiB'
            : 'fileKiB';
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss) out[kind] += Number(rss[1]);
  }
  return out;
}

function memoryBreakdown(m: NodeJS.MemoryUsage): MemoryBreakdown {
  const spaces = getHeapSpaceStatistics();
  const committed = (match: (name: string) => boolean) =>
    Math.round(spaces.filter((s) => match(s.space_name)).reduce((n, s) => n + s.physical_space_size, 0) / 1024);
  return {
    heapTotalKiB: Math.round(m.heapTotal / 1024),
    externalKiB: Math.round(m.external / 1024),
    arrayBuffersKiB: Math.round(m.arrayBuffers / 1024),
    codeSpaceKiB: committed((n) => n === 'code_space' || n === 'code_large_object_space'),
    largeObjectKiB: committed((n) => n === 'large_object_space'),
    ...residentByMapping(),
  };
}

export function answerStats(tables: () => Record<string, number>): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  createInterface({ input: process.stdin }).on('line', (line) => {
    const words = line.trim().split(/\s+/);
    if (words[0] !== 'stats') return;
    const collect = words[1] === 'gc' && gc !== undefined;
    if (collect) gc();
    const m = process.memoryUsage();
    const stats: ProcessStats = {
      gc: collect,
      rssKiB: Math.round(m.rss / 1024),
      heapUsedKiB: Math.round(m.heapUsed / 1024),
      fds: readdirSync('/proc/self/fd').length,
      tables: tables(),
      ...(collect ? { memory: memoryBreakdown(m) } : {}),
    };
    process.stdout.write(`${JSON.stringify(stats)}\n`);
  });
}
