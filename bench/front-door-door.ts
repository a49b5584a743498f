// The front door alone in a process of its own, for the bench's front-door section (front-door.ts):
// one route, `localhost` to the backend port given, on a free loopback port. Prints {"port"} when
// it listens; then, for each line on stdin, one JSON line with its RSS in KiB after a full GC and
// the connections it holds (so the bench measures the door's memory and nothing else's). It loads
// kctl's native addon, built here as dist/kctl carries it, so the kernel relays the bytes (splice)
// as in a real kctl; a checkout alone would pipe them in JavaScript.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { buildNativeAddon } from '../assets/native/build.ts';
import { createLogger } from '../src/base/log.ts';
import { releaseFreedMemory } from '../src/base/memory.ts';
import { useNativeAddon } from '../src/base/native.ts';
import { FrontDoor } from '../src/frontdoor/router.ts';
import { rssKiB } from './procs.ts';

const addonDir = await mkdtemp(join(tmpdir(), 'kctl-bench-addon-'));
try {
  useNativeAddon(await buildNativeAddon(addonDir));
} finally {
  // Loaded: the file is no longer needed.
  await rm(addonDir, { recursive: true, force: true });
}

const backend = Number(process.argv[2]);
const route = { cluster: 'bench', endpoint: 'api', host: '127.0.0.1', port: backend };
const door = new FrontDoor(
  { port: 0, address: '127.0.0.1' },
  { route: async (name) => (name === 'localhost' ? route : undefined) },
  createLogger({ destination: process.stderr, pretty: false }),
);
await door.listen();
process.stdout.write(`${JSON.stringify({ port: door.port })}\n`);
for await (const line of createInterface({ input: process.stdin })) {
  void line;
  (globalThis as { gc?: () => void }).gc?.();
  releaseFreedMemory(); // as a kctl process does every minute (base/memory.ts)
  const open = door.stats().clusters.bench?.open ?? 0;
  process.stdout.write(`${JSON.stringify({ rssKiB: rssKiB(process.pid), open })}\n`);
}
