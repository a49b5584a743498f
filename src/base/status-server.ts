// The status socket (<run-dir>/status.sock): `kctl status` asks it over HTTP for JSON. The
// server is the first component a role starts, so the socket answers while the rest comes up.
import { chmod, rm } from 'node:fs/promises';
import { createServer, request, type Server } from 'node:http';
import type { Component, ComponentContext, ComponentStatus } from './component.ts';
import { pollUntil } from './probe.ts';

export interface StatusReport {
  role: 'controller' | 'worker';
  version: string;
  pid: number;
  uptimeSeconds: number;
  components: ComponentStatus[];
}

export class StatusServerComponent<R extends StatusReport = StatusReport> implements Component {
  readonly name = 'status';
  private server: Server | null = null;
  private statuses: () => ComponentStatus[] = () => [];

  constructor(
    private readonly socket: string,
    /** The report, given every other component's status as the manager keeps it. */
    private readonly report: (components: ComponentStatus[]) => R | Promise<R>,
  ) {}

  async init(ctx: ComponentContext): Promise<void> {
    this.statuses = () => ctx.statuses().filter((c) => c.name !== this.name);
  }

  async start(): Promise<void> {
    await rm(this.socket, { force: true });
    const server = createServer((req, res) => {
      if (req.method !== 'GET' || req.url !== '/status') {
        res.writeHead(404).end();
        return;
      }
      Promise.resolve()
        .then(() => this.report(this.statuses()))
        .then(
          (r) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(r)),
          (err: Error) => res.writeHead(500, { 'content-type': 'text/plain' }).end(err.message),
        );
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.socket, () => resolve());
    });
    await chmod(this.socket, 0o600);
    this.server = server;
  }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = null;
    if (s) await new Promise<void>((resolve) => s.close(() => resolve()));
    await rm(this.socket, { force: true });
  }
}

/** The report of the kctl whose run dir holds `socket`; a one-line reason when none answers. */
export function readStatus<R extends StatusReport = StatusReport>(socket: string, timeoutMs = 5000): Promise<R> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath: socket, path: '/status', timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        body += c;
      });
      res.on('end', () => {
        try {
          resolve(JSON.parse(body) as R);
        } catch {
          reject(new Error(`status socket ${socket} answered something that is not JSON`));
        }
      });
    });
    req.on('timeout', () => req.destroy(new Error(`status socket ${socket} did not answer within ${timeoutMs} ms`)));
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT' || err.code === 'ECONNREFUSED')
        reject(
          new Error(
            `kctl is not running (no status socket at ${socket}); start it, or pass the --run-dir it runs with`,
          ),
        );
      else reject(err);
    });
    req.end();
  });
}

/**
 * Resolves once the kctl behind `socket` runs `version` with every component running (what an
 * upgrade waits for before it keeps the new executable); polls until `signal` aborts.
 */
export async function readyAtVersion(socket: string, version: string, signal: AbortSignal): Promise<void> {
  await pollUntil(
    signal,
    `kctl ${version} ready`,
    async () => {
      const r = await readStatus(socket, 2_000);
      if (r.version !== version) throw new Error(`it runs ${r.version}`);
      const waiting = r.components.filter((c) => c.state !== 'running').map((c) => `${c.name} ${c.state}`);
      if (waiting.length) throw new Error(`not running yet: ${waiting.join(', ')}`);
    },
    1_000,
  );
}
