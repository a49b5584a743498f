// The upstream apiserver-network-proxy binaries (proxy-server, proxy-agent, proxy-test-client)
// that the component payload build carries for interoperability tests and benchmarks.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { cacheRoot } from '../../../src/payload/manifest.ts';

const UPSTREAM = ['proxy-server', 'proxy-agent', 'proxy-test-client'] as const;

/** The payload build that carries the upstream binaries; a clear failure when there is none. */
export function upstreamBin(): Record<(typeof UPSTREAM)[number], string> {
  const root = join(cacheRoot(), 'components');
  const dirs = existsSync(root) ? readdirSync(root) : [];
  for (const d of dirs) {
    const lock = join(root, d, 'payload.lock.json');
    if (!existsSync(lock)) continue;
    const names = (JSON.parse(readFileSync(lock, 'utf8')) as { components: { name: string }[] }).components.map(
      (c) => c.name,
    );
    if (UPSTREAM.every((n) => names.includes(n) && existsSync(join(root, d, 'bin', n)))) {
      return Object.fromEntries(UPSTREAM.map((n) => [n, join(root, d, 'bin', n)])) as Record<
        (typeof UPSTREAM)[number],
        string
      >;
    }
  }
  throw new Error(
    `upstream konnectivity binaries (${UPSTREAM.join(', ')}) not found under ${root}; build the component payload first (npm run components)`,
  );
}
