// For the standalone bench processes (kctl-server.ts, kctl-agent.ts): a "stats" line on stdin
// collects garbage (when the process runs with --expose-gc) and answers with one JSON line: the
// memory it then holds, its open file descriptors and its connection tables. A leak check then
// compares what is live rather than how much the heap happened to grow.
import { readdirSync } from 'node:fs';
import { createInterface } from 'node:readline';

export interface ProcessStats {
  /** False when the process runs without --expose-gc: memory is then measured without a collection. */
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
    if (line.trim() !== 'stats') return;
    gc?.();
    const m = process.memoryUsage();
    const stats: ProcessStats = {
      gc: gc !== undefined,
      rssKiB: Math.round(m.rss / 1024),
      heapUsedKiB: Math.round(m.heapUsed / 1024),
      fds: readdirSync('/proc/self/fd').length,
      tables: tables(),
    };
    process.stdout.write(`${JSON.stringify(stats)}\n`);
  });
}
