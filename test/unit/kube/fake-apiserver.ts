// A fake kube-apiserver over plain HTTP for client tests: each request is recorded and answered
// by the test's handler, which may hold a watch stream open and write events to it.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeClient } from '../../../src/kube/client.ts';

export interface SeenRequest {
  method: string;
  path: string;
  query: URLSearchParams;
  headers: IncomingMessage['headers'];
  body: string;
}

export type Handler = (req: SeenRequest, res: ServerResponse) => void;

export interface FakeApiServer {
  url: string;
  requests: SeenRequest[];
  /** Resolves when the n-th request (1-based) has arrived. */
  nth(n: number): Promise<SeenRequest>;
  close(): Promise<void>;
}

export async function fakeApiServer(
  t: { after: (fn: () => Promise<void>) => void },
  handler: Handler,
): Promise<FakeApiServer> {
  const requests: SeenRequest[] = [];
  const waiters: { n: number; resolve: (r: SeenRequest) => void }[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://x');
      const seen: SeenRequest = {
        method: req.method ?? '',
        path: url.pathname,
        query: url.searchParams,
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      };
      requests.push(seen);
      for (const w of waiters.filter((x) => x.n === requests.length)) w.resolve(seen);
      handler(seen, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const close = async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  t.after(close);
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    nth: (n) =>
      requests.length >= n ? Promise.resolve(requests[n - 1]!) : new Promise((resolve) => waiters.push({ n, resolve })),
    close,
  };
}

export function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

/** Starts a watch response; write events with event(). */
export function watchStream(res: ServerResponse): { event: (type: string, object: unknown) => void; end: () => void } {
  res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
  return {
    event: (type, object) => {
      res.write(JSON.stringify({ type, object }) + '\n');
    },
    end: () => res.end(),
  };
}

export function node(
  name: string,
  resourceVersion: string,
  podCIDR?: string,
): {
  apiVersion: string;
  kind: string;
  metadata: { name: string; resourceVersion: string };
  spec: { podCIDR?: string };
} {
  return { apiVersion: 'v1', kind: 'Node', metadata: { name, resourceVersion }, spec: { podCIDR } };
}

/** One Lease kept the way kube-apiserver keeps it: create fails when it exists, an update with a stale resourceVersion conflicts. */
export async function fakeLeaseApi(t: Parameters<typeof fakeApiServer>[0]) {
  let stored: { metadata: { resourceVersion: string } } | undefined;
  let rv = 0;
  const state = { down: false };
  const api = await fakeApiServer(t, (req, res) => {
    const reply = (code: number, body: unknown) =>
      res.writeHead(code, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    if (state.down) return reply(503, { code: 503, message: 'unavailable' });
    if (req.method === 'GET')
      return stored ? reply(200, stored) : reply(404, { code: 404, reason: 'NotFound', message: 'not found' });
    const obj = JSON.parse(req.body) as { metadata: { resourceVersion?: string } };
    if (req.method === 'POST' && stored) return reply(409, { code: 409, reason: 'AlreadyExists', message: 'exists' });
    if (req.method === 'PUT' && obj.metadata.resourceVersion !== stored?.metadata.resourceVersion)
      return reply(409, { code: 409, reason: 'Conflict', message: 'conflict' });
    stored = { ...obj, metadata: { ...obj.metadata, resourceVersion: String(++rv) } };
    reply(200, stored);
  });
  return {
    kube: new KubeClient({ server: api.url }),
    state,
    stored: () => stored as { spec?: { holderIdentity?: string } } | undefined,
  };
}
