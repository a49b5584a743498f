// The standalone agent's and server's HTTP endpoints, laid out as upstream's proxy-agent and
// proxy-server lay them out, so probes, scrapers and dashboards written for them work unchanged:
// - health port (all interfaces by default): /healthz, /readyz and /ready, /metrics; the agent
//   answers readiness with upstream's check lines (503 when one fails), the server with "ok" or
//   500 and the reason;
// - admin port (loopback by default): /metrics (the agent redirects it to the health port, the
//   server serves it), and with profiling on, /debug/pprof/ serves Node's equivalents (CPU
//   profile, heap snapshot, event-loop delay).
// The commands run each as a component (`endpointComponent`); an in-process server's own admin
// port (the controller's, server/admin.ts) is a different, smaller thing.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { Session } from 'node:inspector/promises';
import type { AddressInfo } from 'node:net';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { getHeapSnapshot } from 'node:v8';
import { readFileSync } from 'node:fs';
import { Counter, Gauge, collectDefaultMetrics, type Registry } from 'prom-client';
import type { Component } from '../../base/component.ts';

type IntervalHistogram = ReturnType<typeof monitorEventLoopDelay>;

/** One readiness check, named as upstream names it; `check` returns an error text or null. */
export interface ReadinessCheck {
  name: string;
  check(): string | null;
}

const TEXT = { 'Content-Type': 'text/plain; charset=utf-8' };

function text(res: ServerResponse, code: number, body: string): void {
  res.writeHead(code, TEXT);
  res.end(body);
}

/**
 * The process and scrape families Go's client library adds to every registry (same names and
 * HELP), read from /proc as Go reads them. Go's runtime families (go_*) have no meaning in Node;
 * Node's own (nodejs_*) come instead.
 */
export function addProcessMetrics(registry: Registry): { requests: Counter<'code'>; inFlight: Gauge } {
  collectDefaultMetrics({ register: registry });
  const registers = [registry];
  new Gauge({
    name: 'process_virtual_memory_max_bytes',
    help: 'Maximum amount of virtual memory available in bytes.',
    registers,
    collect() {
      const line = /^Max address space\s+(\S+)/m.exec(readProc('/proc/self/limits'))?.[1];
      this.set(line === undefined || line === 'unlimited' ? -1 : Number(line));
    },
  });
  const net = (field: 'receive' | 'transmit'): number => {
    let sum = 0;
    for (const l of readProc('/proc/self/net/dev').split('\n').slice(2)) {
      const cols = l.split(':')[1]?.trim().split(/\s+/);
      if (cols) sum += Number(cols[field === 'receive' ? 0 : 8]) || 0;
    }
    return sum;
  };
  for (const field of ['receive', 'transmit'] as const)
    new Counter({
      name: `process_network_${field}_bytes_total`,
      help: `Number of bytes ${field === 'receive' ? 'received' : 'sent'} by the process over the network.`,
      registers,
      collect() {
        this.reset();
        this.inc(net(field));
      },
    });
  const inFlight = new Gauge({
    name: 'promhttp_metric_handler_requests_in_flight',
    help: 'Current number of scrapes being served.',
    registers,
  });
  const requests = new Counter({
    name: 'promhttp_metric_handler_requests_total',
    help: 'Total number of scrapes by HTTP status code.',
    labelNames: ['code'],
    registers,
  });
  // Go's client shows every code from the start.
  for (const code of ['200', '500', '503']) requests.inc({ code }, 0);
  return { requests, inFlight };
}

function readProc(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

export interface HealthServerOptions {
  /** '' listens on every interface, as Go does for an empty host. */
  host: string;
  port: number;
  checks: ReadinessCheck[];
  /** 'agent' (default): check lines, 503 on failure. 'server': "ok", or 500 with the failed check's text. */
  readiness?: 'agent' | 'server';
  registry: Registry;
}

async function listen(server: Server, host: string, port: number, what: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        new Error(
          `cannot listen on ${host || '*'}:${port} for the ${what} (${err.code ?? err.message}); pick another port or address`,
        ),
      ),
    );
    const done = () => resolve((server.address() as AddressInfo).port);
    if (host === '') server.listen(port, done);
    else server.listen(port, host, done);
  });
}

type Scrape = ReturnType<typeof addProcessMetrics>;
/** The scrape counters of each registry, shared by its health and admin ports. */
const scrapes = new WeakMap<Registry, Scrape>();

function serveMetrics(registry: Registry, scrape: Scrape, res: ServerResponse): void {
  scrape.inFlight.inc();
  registry.metrics().then(
    (body) => {
      scrape.inFlight.dec();
      scrape.requests.inc({ code: '200' });
      res.writeHead(200, { 'Content-Type': registry.contentType });
      res.end(body);
    },
    (err: Error) => {
      scrape.inFlight.dec();
      scrape.requests.inc({ code: '500' });
      text(res, 500, err.message);
    },
  );
}

/** The health port: /healthz, /readyz, /ready, /metrics. Resolves with the bound port. */
export async function serveHealth(o: HealthServerOptions): Promise<{ server: Server; port: number }> {
  const scrape = addProcessMetrics(o.registry);
  const readiness = (req: IncomingMessage, res: ServerResponse): void => {
    if (o.readiness === 'server') {
      const err = o.checks.map((c) => c.check()).find((e) => e !== null);
      return err === undefined ? text(res, 200, 'ok') : text(res, 500, err);
    }
    let lines = '';
    const failed: string[] = [];
    for (const c of o.checks) {
      const err = c.check();
      if (err === null) lines += `[+]${c.name} ok\n`;
      else {
        lines += `[-]${c.name} failed: ${err}\n`;
        failed.push(c.name);
      }
    }
    if (failed.length > 0) return text(res, 503, lines);
    if (!new URL(req.url ?? '/', 'http://x').searchParams.has('verbose')) return text(res, 200, 'ok');
    text(res, 200, `${lines}check passed\n`);
  };
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/healthz') return text(res, 200, 'ok');
    if (path === '/readyz' || path === '/ready') return readiness(req, res);
    if (path !== '/metrics') return text(res, 404, '404 page not found\n');
    serveMetrics(o.registry, scrape, res);
  });
  scrapes.set(o.registry, scrape);
  return { server, port: await listen(server, o.host, o.port, 'health server') };
}

export interface AdminServerOptions {
  host: string;
  port: number;
  /** The agent's /metrics redirects to its health port; the server's serves its registry (after serveHealth). */
  metrics: { redirectToPort: number } | { registry: Registry };
  profiling: boolean;
  contentionProfiling: boolean;
}

/** The admin port: /metrics redirects to the health port; /debug/pprof/ with profiling on. */
export async function serveAdmin(o: AdminServerOptions): Promise<{ server: Server; port: number; close(): void }> {
  const delay: IntervalHistogram | undefined =
    o.profiling && o.contentionProfiling ? monitorEventLoopDelay({ resolution: 10 }) : undefined;
  delay?.enable();
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname === '/metrics') {
      const m = o.metrics;
      if ('registry' in m)
        return serveMetrics(m.registry, scrapes.get(m.registry) ?? addProcessMetrics(m.registry), res);
      const host = (req.headers.host ?? 'localhost').replace(/:\d+$/, '');
      res.writeHead(301, { Location: `//${host}:${m.redirectToPort}/metrics${url.search}`, ...TEXT });
      return res.end();
    }
    if (!o.profiling || !url.pathname.startsWith('/debug/pprof')) return text(res, 404, '404 page not found\n');
    void pprof(url, res, delay).catch((err: Error) => text(res, 500, `${err.message}\n`));
  });
  return { server, port: await listen(server, o.host, o.port, 'admin server'), close: () => delay?.disable() };
}

const PPROF_INDEX = `kctl is a Node.js process; these are the Node equivalents of Go's pprof profiles:

/debug/pprof/profile?seconds=N  CPU profile for N seconds (default 30), V8 .cpuprofile JSON (Chrome DevTools, speedscope)
/debug/pprof/heap               heap snapshot, V8 .heapsnapshot JSON (Chrome DevTools)
/debug/pprof/block              event-loop delay percentiles (with --enable-contention-profiling)
`;

async function pprof(url: URL, res: ServerResponse, delay: IntervalHistogram | undefined): Promise<void> {
  const path = url.pathname.replace(/\/$/, '');
  if (path === '/debug/pprof') return text(res, 200, PPROF_INDEX);
  if (path === '/debug/pprof/profile') {
    const seconds = Number(url.searchParams.get('seconds') ?? '30');
    if (!Number.isFinite(seconds) || seconds <= 0 || seconds > 3600)
      return text(res, 400, 'seconds must be between 0 and 3600\n');
    const session = new Session();
    session.connect();
    try {
      await session.post('Profiler.enable');
      await session.post('Profiler.start');
      await new Promise((r) => setTimeout(r, seconds * 1000));
      const { profile } = await session.post('Profiler.stop');
      res.writeHead(200, {
        'Content-Type': 'application/json',
        'Content-Disposition': 'attachment; filename="kctl.cpuprofile"',
      });
      res.end(JSON.stringify(profile));
    } finally {
      session.disconnect();
    }
    return;
  }
  if (path === '/debug/pprof/heap') {
    res.writeHead(200, {
      'Content-Type': 'application/json',
      'Content-Disposition': 'attachment; filename="kctl.heapsnapshot"',
    });
    getHeapSnapshot().pipe(res);
    return;
  }
  if (path === '/debug/pprof/block') {
    if (!delay) return text(res, 404, 'start with --enable-contention-profiling\n');
    const ms = (n: number) => (n / 1e6).toFixed(3);
    return text(
      res,
      200,
      `event-loop delay since start (ms): min ${ms(delay.min)} mean ${ms(delay.mean)} p50 ${ms(delay.percentile(50))} p99 ${ms(delay.percentile(99))} max ${ms(delay.max)}\n`,
    );
  }
  text(res, 404, '404 page not found\n');
}

/** A health or admin endpoint server as a component: listens on start, closes every connection on stop. */
export function endpointComponent(
  name: string,
  serve: () => Promise<{ server: Server; port: number; close?(): void }>,
): Component & { port(): number } {
  let served: { server: Server; port: number; close?(): void } | undefined;
  return {
    name,
    port: () => served?.port ?? 0,
    start: async () => {
      served = await serve();
    },
    stop: async () => {
      if (!served) return;
      served.close?.();
      served.server.closeAllConnections();
      await new Promise((r) => served?.server.close(r));
    },
  };
}
