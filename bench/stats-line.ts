// For the standalone bench processes (kctl-server.ts, kctl-agent.ts): a "stats" line on stdin
// answers with one JSON line: memory, open file descriptors and the connection tables. "stats gc"
// first collects garbage (when the process runs with --expose-gc), so a leak check compares what
// is live rather than how much the heap happened to grow; plain "stats" is cheap enough to poll.
import { readdirSync } from 'node:fs';
import { createInterface } from 'node:readline';

export interface ProcessStats {
  /** True when garbage was collected first ("stats gc" in a process run with --expose-gc). */
  gc: boolean;
  rssKiB: number;
  heapUsedKiB: number;
  fds: number;
  /** The process's own connection tables (server: agents, tunnels, pending dials; agent: servers, targets, dials). */
  tables: Record<string, number>;
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
    };
    process.stdout.write(`${JSON.stringify(stats)}\n`);
  });
}
