// For the standalone bench processes (kctl-server.ts, kctl-agent.ts): a "gc" line on stdin
// collects garbage (the process runs with --expose-gc) and answers with the memory it then holds,
// so a leak check compares what is live rather than how much the heap happened to grow.
import { createInterface } from 'node:readline';

export function answerGc(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  createInterface({ input: process.stdin }).on('line', (line) => {
    if (line.trim() !== 'gc') return;
    gc?.();
    const m = process.memoryUsage();
    process.stdout.write(
      `${JSON.stringify({ gc: gc !== undefined, rssKiB: Math.round(m.rss / 1024), heapUsedKiB: Math.round(m.heapUsed / 1024) })}\n`,
    );
  });
}
