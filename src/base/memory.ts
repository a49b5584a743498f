// Giving back the heap memory a start freed. glibc keeps free pages in the middle of its heap
// until malloc_trim(0) is called, and a kctl process frees 10-20 MiB after its start (bench/HISTORY.md
// has the measurements). dist/kctl carries a tiny Node-API addon for that call (assets/malloc-trim);
// a run from a checkout has none, and trimming is then skipped.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as sea from 'node:sea';
import type { Logger } from './log.ts';
import { messageOf } from './errors.ts';

/** The addon's name among the executable's assets. */
export const MALLOC_TRIM_ASSET = 'malloc-trim.node';
/** A trim now and then, for what later work (add-ons applied, a child restarted, a big list) frees. */
const TRIM_EVERY_MS = 60_000;

let trimFn: (() => boolean) | null | undefined;

function loadTrim(): (() => boolean) | null {
  if (!sea.isSea()) return null;
  // Node loads addons from files only: write it to a private directory, load it, remove it.
  const dir = mkdtempSync(join(tmpdir(), 'kctl-addon-'));
  try {
    const file = join(dir, MALLOC_TRIM_ASSET);
    writeFileSync(file, Buffer.from(sea.getRawAsset(MALLOC_TRIM_ASSET)), { mode: 0o700 });
    const mod: { exports: { trim?: () => boolean } } = { exports: {} };
    process.dlopen(mod, file);
    return mod.exports.trim ?? null;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** malloc_trim(0): true if memory went back to the system, undefined when this runtime cannot. */
export function releaseFreedMemory(log?: Logger): boolean | undefined {
  if (trimFn === undefined) {
    try {
      trimFn = loadTrim();
    } catch (err) {
      // e.g. a temporary directory mounted noexec: kctl runs as before, only with more RSS.
      trimFn = null;
      log?.debug({ err: messageOf(err) }, 'cannot load the malloc-trim addon; freed heap memory stays with the process');
    }
  }
  return trimFn ? trimFn() : undefined;
}

/** Trims once now (logging what it gave back) and then every minute, until the returned stop is called. */
export function trimFreedMemory(log: Logger): () => void {
  const before = process.memoryUsage.rss();
  if (releaseFreedMemory(log) === undefined) return () => undefined;
  const mib = (n: number): number => Math.round((n / 2 ** 20) * 10) / 10;
  log.info({ rssBeforeMiB: mib(before), rssAfterMiB: mib(process.memoryUsage.rss()) }, 'gave the heap memory the start freed back to the system');
  const timer = setInterval(() => releaseFreedMemory(log), TRIM_EVERY_MS);
  timer.unref();
  return () => clearInterval(timer);
}
