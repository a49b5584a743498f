// Small shared helpers for tests.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../src/base/log.ts';

export async function tempDir(t: { after: (fn: () => Promise<void>) => void }, prefix = 'kctl-test-'): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** A logger whose JSON lines the test can read back. */
export function captureLogger(): { log: Logger; lines: () => Record<string, unknown>[]; raw: () => string } {
  const chunks: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _e, cb) {
      chunks.push(chunk.toString());
      cb();
    },
  });
  const log = createLogger({ destination: sink, pretty: false, debug: true });
  return {
    log,
    raw: () => chunks.join(''),
    lines: () =>
      chunks
        .join('')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}
