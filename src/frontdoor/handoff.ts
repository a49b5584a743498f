// Where the front door hands a connection to one of this cluster's own listeners (the
// konnectivity agent port, the join endpoint): a loopback port that takes only connections that
// start with a PROXY v2 header carrying this cluster's key (proxy-header.ts), and passes each on
// with the client's address, the bytes after the header still to be read. Anything else is closed
// and counted; a line is logged at most once a minute (only a local process can be wrong here).
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { messageOf } from '../base/errors.ts';
import type { Logger } from '../base/log.ts';
import { readProxyHeader, type Endpoint } from './proxy-header.ts';

/** The header must arrive within this (the door writes it at once). */
const HEADER_TIMEOUT_MS = 5_000;
const REFUSAL_LOG_EVERY_MS = 60_000;

/** A new key for a registration (the door reads it from the registry, which only root can read). */
export const newHandoffKey = (): Buffer => randomBytes(32);

export class DoorHandoff {
  private server: Server | undefined;
  private readonly open = new Set<Socket>();
  private lastRefusalLog = 0;
  refused = 0;

  constructor(
    /** What this listener leads to, for log lines (konnectivity, join). */
    readonly endpoint: string,
    private readonly key: Buffer,
    private readonly onConnection: (socket: Socket, client: Endpoint) => void,
    private readonly log: Logger,
  ) {}

  /**
   * Listens (default on a free loopback port, where the host's own door reaches it; an external
   * door's handoff listens on a fixed port of every address); resolves with the port.
   */
  async listen(at: { port: number; host: string } = { port: 0, host: '127.0.0.1' }): Promise<number> {
    const server = createServer({ noDelay: true, allowHalfOpen: true }, (s) => this.accept(s));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(at, () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', (err) =>
      this.log.error({ err: messageOf(err), endpoint: this.endpoint }, 'front door handoff listener failed'),
    );
    this.server = server;
    return (server.address() as AddressInfo).port;
  }

  async close(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (!server) return;
    const closed = new Promise<void>((r) => server.close(() => r()));
    // Only the ones still reading their header: the rest belong to the listener they were passed to.
    for (const s of this.open) s.destroy();
    await closed;
  }

  private accept(socket: Socket): void {
    this.open.add(socket);
    let head: Buffer = Buffer.alloc(0);
    const timer = setTimeout(() => refuse('no header in time'), HEADER_TIMEOUT_MS);
    const done = (): void => {
      clearTimeout(timer);
      this.open.delete(socket);
      socket.off('data', onData);
    };
    const refuse = (why: string): void => {
      done();
      this.refuse(why);
      socket.destroy();
    };
    const onData = (chunk: Buffer): void => {
      head = head.length === 0 ? chunk : Buffer.concat([head, chunk]);
      const h = readProxyHeader(head);
      if (h.kind === 'more') return;
      if (h.kind === 'bad') return refuse(h.reason);
      if (!h.key || h.key.length !== this.key.length || !timingSafeEqual(h.key, this.key))
        return refuse("a header without this cluster's key");
      done();
      socket.pause();
      if (head.length > h.length) socket.unshift(head.subarray(h.length));
      // Paused, the rest still in its buffer: a TLS server given it reads that first.
      this.onConnection(socket, h.source);
    };
    socket.on('data', onData);
    socket.on('error', () => socket.destroy());
    socket.once('close', () => {
      clearTimeout(timer);
      this.open.delete(socket);
    });
  }

  private refuse(why: string): void {
    this.refused++;
    const now = Date.now();
    if (now - this.lastRefusalLog < REFUSAL_LOG_EVERY_MS) return;
    this.lastRefusalLog = now;
    this.log.warn(
      { endpoint: this.endpoint, refused: this.refused },
      `front door handoff closed a local connection: ${why} (logged once a minute)`,
    );
  }
}
