// The peer behind the front-door section's `upstream` column: HAProxy (Debian's package), the
// router platform teams put in front of many clusters' API servers today, configured as kctl's
// door works: TCP mode, wait for the ClientHello, route by its server name, pass the bytes through
// untouched, close a name it does not know. Its own defaults otherwise (one thread per core).
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureDebianPackages } from '../assets/debian.ts';
import { listeningOnLoopback, startProc, waitUntil, type Proc } from './procs.ts';

/** A loopback port free now (HAProxy cannot report one it picked itself). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => resolve(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

function config(port: number, backend: number): string {
  return [
    'global',
    '  maxconn 8000',
    'defaults',
    '  mode tcp',
    '  timeout connect 5s',
    '  timeout client 1h',
    '  timeout server 1h',
    'frontend door',
    `  bind 127.0.0.1:${port}`,
    '  tcp-request inspect-delay 10s',
    '  tcp-request content accept if { req.ssl_hello_type 1 }',
    '  use_backend server if { req.ssl_sni -i localhost }',
    'backend server',
    `  server s 127.0.0.1:${backend}`,
    '',
  ].join('\n');
}

/** HAProxy routing `localhost` to the backend port; stop() ends it and removes its config. */
export async function startHaproxy(backend: number): Promise<{ proc: Proc; port: number; stop(): Promise<void> }> {
  await ensureDebianPackages(['haproxy']);
  const dir = await mkdtemp(join(tmpdir(), 'kctl-bench-haproxy-'));
  const port = await freePort();
  const file = join(dir, 'haproxy.cfg');
  await writeFile(file, config(port, backend));
  // -db: stay in the foreground, logs to stderr (kept by the harness for a failure's message).
  const proc = startProc('haproxy', '/usr/sbin/haproxy', ['-db', '-f', file]);
  try {
    await waitUntil(
      'haproxy listens',
      () => listeningOnLoopback(port),
      10_000,
      () => proc.output(),
      [proc],
    );
  } catch (err) {
    await proc.stop();
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    proc,
    port,
    async stop() {
      await proc.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
