// Giving back the heap memory a start freed. glibc keeps free pages in the middle of its heap
// until malloc_trim(0) is called, and a kctl process frees 10-20 MiB after its start (bench/HISTORY.md
// has the measurements). dist/kctl carries a tiny Node-API addon for that call (assets/native,
// base/native.ts); a run from a checkout has none, and trimming is then skipped.
import type { Logger } from './log.ts';
import { nativeAddon, nativeAddonError } from './native.ts';

/** A trim now and then, for what later work (add-ons applied, a child restarted, a big list) frees. */
const TRIM_EVERY_MS = 60_000;
let reported = false;

/** malloc_trim(0): true if memory went back to the system, undefined when this runtime cannot. */
export function releaseFreedMemory(log?: Logger): boolean | undefined {
  const native = nativeAddon();
  if (!native && !reported && nativeAddonError()) {
    // e.g. a temporary directory mounted noexec: kctl runs as before, only with more RSS.
    reported = true;
    log?.debug({ err: nativeAddonError() }, 'cannot load the native addon; freed heap memory stays with the process');
  }
  return native ? native.trim() : undefined;
}

/** Trims once now (logging what it gave back) and then every minute, until the returned stop is called. */
export function trimFreedMemory(log: Logger): () => void {
  const before = process.memoryUsage.rss();
  if (releaseFreedMemory(log) === undefined) return () => undefined;
  const mib = (n: number): number => Math.round((n / 2 ** 20) * 10) / 10;
  log.info(
    { rssBeforeMiB: mib(before), rssAfterMiB: mib(process.memoryUsage.rss()) },
    'gave the heap memory the start freed back to the system',
  );
  const timer = setInterval(() => releaseFreedMemory(log), TRIM_EVERY_MS);
  timer.unref();
  return () => clearInterval(timer);
}
