// KonnectivityServer's own admin HTTP endpoint (option adminPort; loopback by default), as the
// controller runs it: /healthz, /readyz and /metrics with upstream's paths and answers, so
// upstream probes and scrapers work unchanged. The standalone binaries' health and admin ports
// (process metrics, pprof, upstream's two-port layout) are dropin/upstream-ports.ts, which kctl
// konnectivity-server and konnectivity-agent open themselves; the two stay apart on purpose.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';

export interface AdminEndpoints {
  /** /readyz answers 500 "no connection to any proxy agent" while this is false. */
  hasAgents(): boolean;
  registry: Registry;
}

/** Listens and resolves with the bound port (0 picks a free one). */
export async function listenAdmin(
  port: number,
  host: string,
  e: AdminEndpoints,
): Promise<{ server: Server; port: number }> {
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    const text = (code: number, body: string): void => {
      res.writeHead(code, { 'Content-Type': 'text/plain; charset=utf-8' });
      res.end(body);
    };
    if (path === '/healthz') return text(200, 'ok');
    if (path === '/readyz') return e.hasAgents() ? text(200, 'ok') : text(500, 'no connection to any proxy agent');
    if (path !== '/metrics') return text(404, 'not found');
    e.registry.metrics().then(
      (body) => {
        res.writeHead(200, { 'Content-Type': e.registry.contentType });
        res.end(body);
      },
      (err: Error) => text(500, err.message),
    );
  });
  const bound = await new Promise<number>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve((server.address() as AddressInfo).port));
  });
  return { server, port: bound };
}
