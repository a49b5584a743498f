// The agent port before authentication, as a host on the Internet sees it: how many connections
// may wait to authenticate, how long each may take, how much each may send first, and that real
// agents still connect while a flood of connections that never authenticate sits on the port.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { connect as h2Connect, constants as h2c, type ClientHttp2Session } from 'node:http2';
import { createServer, connect as tcpConnect, Socket } from 'node:net';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { createLogger } from '../../../src/base/log.ts';
import type { KonnectivityServer } from '../../../src/konnectivity/server/server.ts';
import { PreAuthBounds } from '../../../src/konnectivity/server/pre-auth.ts';
import { FRAME, LINK_ALPN } from '../../../src/konnectivity/wire/link.ts';
import { makePki, OWN_LOOPBACK, startAgent, startServer, type TestPki } from './fixtures.ts';
import { waitFor } from '../../wait.ts';

/** Every server here counts the connections it sees: on an address no other test file uses. */
const HOST = OWN_LOOPBACK;

type T = { after: (fn: () => Promise<void> | void) => void };

/** A logger whose lines the test reads back. */
function capturedLog(): { log: ReturnType<typeof createLogger>; lines: string[] } {
  const lines: string[] = [];
  const log = createLogger({
    destination: new Writable({ write: (c: Buffer, _e, cb) => (lines.push(c.toString()), cb()) }),
    pretty: false,
  });
  return { log, lines };
}

const portLines = (lines: string[]): string[] => lines.filter((l) => l.includes('agent port:'));

/** A client connection, and whether it has closed (whoever closed it). */
interface Held<S> {
  socket: S;
  isClosed(): boolean;
}

function held<S extends { once(e: 'close', f: () => void): unknown; on(e: 'error', f: () => void): unknown }>(
  t: T,
  socket: S,
  destroy: () => void,
): Held<S> {
  let gone = false;
  socket.on('error', () => {});
  socket.once('close', () => (gone = true));
  t.after(destroy);
  return { socket, isClosed: () => gone };
}

/** Resolves once every connection in `cs` is closed; fails after 10 s. */
function allClosed(what: string, cs: Held<unknown>[]): Promise<unknown> {
  return waitFor(what, 10_000, () => cs.every((c) => c.isClosed()));
}

/** A TCP connection that never starts TLS. */
async function silentTcp(t: T, port: number): Promise<Held<Socket>> {
  const s = tcpConnect({ host: HOST, port });
  const h = held(t, s, () => s.destroy());
  await new Promise<void>((resolve, reject) => {
    s.once('connect', resolve);
    s.once('error', reject);
  });
  return h;
}

/** A TLS connection that chose `alpn`; it says nothing unless the test writes to it. */
async function tlsClient(t: T, pki: TestPki, port: number, alpn: string): Promise<Held<TLSSocket>> {
  const s = tlsConnect({ host: HOST, port, ca: pki.ca, servername: 'localhost', ALPNProtocols: [alpn] });
  const h = held(t, s, () => s.destroy());
  await new Promise<void>((resolve, reject) => {
    s.once('secureConnect', resolve);
    s.once('error', reject);
  });
  assert.equal(s.alpnProtocol, alpn);
  return h;
}

/** An HTTP/2 session (TLS done, preface and SETTINGS exchanged) that opens no stream yet. */
async function h2Client(t: T, pki: TestPki, port: number): Promise<Held<ClientHttp2Session>> {
  const s = h2Connect(`https://${HOST}:${port}`, { ca: pki.ca, servername: 'localhost' });
  const h = held(t, s, () => s.destroy());
  await new Promise<void>((resolve, reject) => {
    s.once('connect', () => resolve());
    s.once('error', reject);
  });
  return h;
}

/** What an agent nobody knows sends on Connect: its token then waits for review. */
const STRANGER = { agentid: 'mallory', authorization: 'Bearer not-reviewed-yet' };

/** A Connect stream as an upstream agent opens it, with `metadata`. */
function connectStream(
  session: ClientHttp2Session,
  metadata: Record<string, string> = STRANGER,
): ReturnType<ClientHttp2Session['request']> {
  const stream = session.request({
    [h2c.HTTP2_HEADER_METHOD]: 'POST',
    [h2c.HTTP2_HEADER_PATH]: '/AgentService/Connect',
    [h2c.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc',
    te: 'trailers',
    ...metadata,
  });
  stream.on('error', () => {});
  return stream;
}

/** A token review that never answers: Connects that carry a token stay unauthenticated. */
const neverReviewed = (): Promise<{ ok: boolean }> => new Promise(() => {});

/**
 * A flood from its own process: every 10 ms, `argv[2]` new TCP connections to port `argv[1]`, left
 * open (the server closes them); prints how many were opened, every 100 ms. The rate stays below
 * what the server accepts: past that the kernel's accept queue overflows and drops SYNs, which
 * costs any client, agents included, a 1 s retransmit whatever the server does.
 */
const CHURN = `
const net = require('node:net');
const [host, port, perTick] = process.argv.slice(1);
let opened = 0;
setInterval(() => process.stdout.write(opened + '\\n'), 100);
setInterval(() => {
  for (let i = 0; i < Number(perTick); i++) {
    const s = net.connect({ host, port: Number(port) });
    s.on('error', () => {});
    s.once('connect', () => opened++);
  }
}, 10);
`;

/** Milliseconds from starting a kctl agent until it holds its stream to `server`. */
async function connectMs(
  t: T,
  pki: TestPki,
  server: KonnectivityServer,
  node: string,
  minted?: { cert: string; key: string },
): Promise<number> {
  const cert = minted ?? (await pki.nodeCert(node)); // minted first: only the connect is timed
  const started = performance.now();
  const agent = await startAgent(t, pki, [server], { agentId: node, ...cert });
  await waitFor(`${node} connected`, 30_000, () => agent.snapshot().servers.length === 1);
  const ms = performance.now() - started;
  await agent.stop({ drain: false });
  await waitFor(`${node} gone from the server`, 10_000, () => server.snapshot().agents.every((a) => a.node !== node));
  return ms;
}

test('at the cap, a new connection closes the one that has waited longest, with one warn line for the burst', async (t) => {
  const pki = await makePki();
  const { log, lines } = capturedLog();
  const server = await startServer(t, pki, { agentBindAddress: HOST, maxUnauthenticatedAgents: 4, log });
  const port = server.agentPort();
  // Opened one after the other, so accepted in this order.
  const first = [
    await silentTcp(t, port),
    await silentTcp(t, port),
    await tlsClient(t, pki, port, LINK_ALPN),
    await h2Client(t, pki, port),
  ];

  const later: Held<Socket>[] = [];
  for (const oldest of first.slice(0, 3)) {
    later.push(await silentTcp(t, port));
    await allClosed('the oldest connection closed', [oldest]);
  }
  assert.deepEqual(
    [...first, ...later].map((c) => c.isClosed()),
    [true, true, true, false, false, false, false],
  );
  const warned = portLines(lines);
  assert.equal(warned.length, 1, warned.join(''));
  assert.match(
    warned[0]!,
    /4 connections were waiting to authenticate \(the cap\), so the one waiting longest made room/,
  );

  // The rest of the burst is one summary line (at the latest when the server stops).
  await server.stop();
  const all = portLines(lines);
  assert.equal(all.length, 2, all.join(''));
  assert.match(
    all[1]!,
    /closed 2 more connections before they authenticated \(2 to make room at the cap of 4 waiting\)/,
  );
});

test('a connection that has not authenticated by the deadline is closed, whatever it got to; authenticated agents stay', async (t) => {
  const pki = await makePki();
  const { log, lines } = capturedLog();
  const server = await startServer(t, pki, {
    agentBindAddress: HOST,
    agentAuthTimeoutMs: 500,
    tokenReview: neverReviewed,
    log,
  });
  const port = server.agentPort();
  const linkAgent = await startAgent(t, pki, [server], { agentId: 'node-link' });
  const grpcAgent = await startAgent(t, pki, [server], { agentId: 'node-grpc', extensions: false });
  await waitFor('both agents connected', 10_000, () => server.snapshot().agents.length === 2);
  const since = server.snapshot().agents.map((a) => a.connectedAt);

  const tcp = await silentTcp(t, port); // no TLS at all
  const link = await tlsClient(t, pki, port, LINK_ALPN); // TLS, then no HELLO
  const h2 = await h2Client(t, pki, port); // HTTP/2, no stream
  const pending = await h2Client(t, pki, port); // a Connect whose token is never reviewed
  connectStream(pending.socket);
  await allClosed('the silent connections closed', [tcp, link, h2, pending]);

  await sleep(600); // past the deadline for the agents' own connections too
  assert.deepEqual(
    server.snapshot().agents.map((a) => a.connectedAt),
    since,
  );
  assert.equal(linkAgent.snapshot().servers.length, 1);
  assert.equal(grpcAgent.snapshot().servers.length, 1);
  const warned = portLines(lines);
  assert.equal(warned.length, 1, warned.join(''));
  assert.match(warned[0]!, /not authenticated within 0.5 s/);
  // The kctl-tunnel/1 connection's own "dropped" line would only repeat the one above.
  assert.equal(lines.filter((l) => l.includes('agent connection dropped')).length, 0, lines.join(''));
});

test('more than 64 KiB before authentication closes the connection: kctl-tunnel/1 frames, HTTP/2 data, HTTP/2 headers', async (t) => {
  const pki = await makePki();
  const cases: [string, (port: number) => Promise<Held<unknown>>][] = [
    [
      'a kctl-tunnel/1 frame that announces 1 MiB',
      async (port) => {
        const c = await tlsClient(t, pki, port, LINK_ALPN);
        const head = Buffer.alloc(5);
        head.writeUInt32BE(1 + 1024 * 1024, 0);
        head[4] = FRAME.PACKET;
        c.socket.write(head);
        for (let i = 0; i < 16 && !c.socket.destroyed; i++) c.socket.write(Buffer.alloc(16 * 1024));
        return c;
      },
    ],
    [
      'data on a Connect whose token waits for review',
      async (port) => {
        const c = await h2Client(t, pki, port);
        const stream = connectStream(c.socket);
        stream.write(Buffer.alloc(1024 * 1024));
        return c;
      },
    ],
    [
      'headers on many streams',
      async (port) => {
        const c = await h2Client(t, pki, port);
        for (let i = 0; i < 16; i++) connectStream(c.socket, { ...STRANGER, 'x-padding': 'p'.repeat(8 * 1024) });
        return c;
      },
    ],
  ];
  for (const [what, send] of cases) {
    const { log, lines } = capturedLog();
    const server = await startServer(t, pki, { agentBindAddress: HOST, tokenReview: neverReviewed, log });
    const client = await send(server.agentPort());
    await allClosed(what, [client]);
    const warned = portLines(lines);
    assert.equal(warned.length, 1, `${what}: ${lines.join('')}`);
    assert.match(warned[0]!, /more than 64 KiB before authenticating/, what);
    const { bytesRead } = JSON.parse(warned[0]!) as { bytesRead: number };
    if (what.includes('kctl-tunnel/1')) {
      // Every chunk read is counted as it arrives: at most one TLS record (16 KiB and a little) past the bound.
      assert.ok(bytesRead <= 64 * 1024 + 17 * 1024, `${what}: ${bytesRead} bytes read`);
    }
    t.diagnostic(`${what}: closed after ${bytesRead} bytes`);
    await server.stop();
  }
});

test('HTTP/2 receive windows stay at 64 KiB until a Connect on the connection authenticated, then widen', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { agentBindAddress: HOST, tokenReview: neverReviewed });
  const port = server.agentPort();
  const settledWindow = async (s: ClientHttp2Session): Promise<number | undefined> => {
    await sleep(200); // a SETTINGS frame the server sent is in by then
    return s.remoteSettings.initialWindowSize;
  };

  const stranger = await h2Client(t, pki, port);
  connectStream(stranger.socket).write(Buffer.alloc(1024));
  assert.equal(await settledWindow(stranger.socket), 65_535);

  const node = await pki.nodeCert('node-h2');
  const agent = h2Connect(`https://${HOST}:${port}`, { ca: pki.ca, servername: 'localhost', ...node });
  held(t, agent, () => agent.destroy());
  const stream = connectStream(agent, { agentid: 'node-h2' });
  const headers = await new Promise<Record<string, unknown>>((resolve) => stream.once('response', resolve));
  assert.equal(typeof headers.serverid, 'string', 'the agent was accepted');
  await waitFor('the agent session widened', 10_000, () => agent.remoteSettings.initialWindowSize === 8 * 1024 * 1024);
  assert.equal(await settledWindow(stranger.socket), 65_535);
});

test('a real agent connects while a flood of connections that never authenticate fills the port', async (t) => {
  const pki = await makePki();
  // The authentication timeout far away: opening the flood took more than its default 10 s under a
  // loaded machine once, and the oldest connections then went by timeout, not by eviction.
  const server = await startServer(t, pki, {
    agentBindAddress: HOST,
    tokenReview: neverReviewed,
    agentAuthTimeoutMs: 300_000,
  });
  const port = server.agentPort();
  const quiet = await connectMs(t, pki, server, 'node-quiet');

  // The default cap of 256, filled: silent TCP, TLS without a HELLO, HTTP/2 without a stream,
  // HTTP/2 with a Connect stuck in token review.
  const flood: Held<unknown>[] = [];
  for (let i = 0; i < 106; i++) flood.push(await silentTcp(t, port));
  for (let i = 0; i < 50; i++) flood.push(await tlsClient(t, pki, port, LINK_ALPN));
  for (let i = 0; i < 50; i++) flood.push(await h2Client(t, pki, port));
  for (let i = 0; i < 50; i++) {
    const c = await h2Client(t, pki, port);
    connectStream(c.socket);
    flood.push(c);
  }
  const full = await connectMs(t, pki, server, 'node-at-cap');
  assert.deepEqual(
    flood.map((c, i) => (c.isClosed() ? i : -1)).filter((i) => i >= 0),
    [0],
    'the agent took the place of the connection that had waited longest, and only of that one',
  );

  // And while new connections keep arriving from another process, each pushing out the oldest.
  const cert = await pki.nodeCert('node-churned');
  const churn = spawn(process.execPath, ['-e', CHURN, HOST, String(port), '8'], {
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  t.after(() => churn.kill());
  let opened = 0;
  churn.stdout.on('data', (c: Buffer) => (opened = Number(c.toString().trim().split('\n').pop()) || opened));
  await waitFor('the churn going', 10_000, () => opened > 256);
  const [before, started] = [opened, performance.now()];
  await sleep(1_000);
  const rate = ((opened - before) * 1000) / (performance.now() - started);
  const churned = await connectMs(t, pki, server, 'node-churned', cert);
  churn.kill();
  t.diagnostic(
    `kctl agent connect: ${quiet.toFixed(0)} ms on a quiet port; ${full.toFixed(0)} ms with the cap (256) full of connections ` +
      `that never authenticate; ${churned.toFixed(0)} ms while new ones arrived at about ${rate.toFixed(0)}/s`,
  );
});

/**
 * A TCP relay on a loopback address of its own that holds every chunk `delayMs` before passing it
 * on, each way, and dials the server from `source`: an agent across a slow link, from its own address.
 */
async function slowLink(
  t: T,
  to: { host: string; port: number },
  source: string,
  delayMs: number,
): Promise<{ host: string; port: number }> {
  const host = '127.0.0.1';
  const relay = createServer((client) => {
    const upstream = tcpConnect({ host: to.host, port: to.port, localAddress: source });
    const pass = (from: Socket, into: Socket) =>
      from.on('data', (chunk: Buffer) => setTimeout(() => into.destroyed || into.write(chunk), delayMs));
    pass(client, upstream);
    pass(upstream, client);
    for (const [a, b] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      a.on('error', () => b.destroy());
      a.on('close', () => setTimeout(() => b.destroy(), delayMs));
    }
  });
  await new Promise<void>((resolve) => relay.listen(0, host, resolve));
  t.after(() => new Promise<void>((resolve) => relay.close(() => resolve())));
  return { host, port: (relay.address() as { port: number }).port };
}

test('a flood that reconnects from one address does not keep out an agent 300 ms away on another: the flood pushes out its own', async (t) => {
  const pki = await makePki();
  const { log, lines } = capturedLog();
  const server = await startServer(t, pki, { agentBindAddress: HOST, maxUnauthenticatedAgents: 32, log });
  const port = server.agentPort();
  // The flood: from the default source address, the cap refilled every 10 ms for as long as it runs.
  const churn = spawn(process.execPath, ['-e', CHURN, HOST, String(port), '8'], {
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  t.after(() => churn.kill());
  let opened = 0;
  churn.stdout.on('data', (c: Buffer) => (opened = Number(c.toString().trim().split('\n').pop()) || opened));
  await waitFor('the churn past the cap', 10_000, () => opened > 64);
  // The agent: 150 ms each way (300 ms round trips), from a loopback address of its own.
  const source = OWN_LOOPBACK.replace(/\.\d+$/, (last) => `.${(Number(last.slice(1)) % 250) + 2}`);
  const link = await slowLink(t, { host: HOST, port }, source, 150);
  const started = performance.now();
  const agent = await startAgent(t, pki, [link], { agentId: 'node-far' });
  await waitFor('the far agent connected during the flood', 30_000, () => agent.snapshot().servers.length === 1);
  const ms = performance.now() - started;
  const during = opened;
  churn.kill();
  assert.ok(
    portLines(lines).some((l) => /\(the cap\)/.test(l)),
    'the flood never reached the cap',
  );
  t.diagnostic(
    `an agent 300 ms away connected in ${ms.toFixed(0)} ms while a flood opened ${during} connections at the cap of 32`,
  );
});

test('connections the front door hands on are counted by the client it names: at the cap the busiest client gives way, not the oldest', (t) => {
  const bounds = new PreAuthBounds({ maxConnections: 3, timeoutMs: 60_000 }, capturedLog().log);
  t.after(() => bounds.close());
  let port = 40_000;
  // Every one of them comes from the door (127.0.0.1); only the PROXY header tells them apart.
  const sockets: Socket[] = [];
  const fromDoor = (): Socket => {
    const s = new Socket();
    Object.defineProperties(s, { remoteAddress: { value: '127.0.0.1' }, remotePort: { value: port++ } });
    sockets.push(s);
    return s;
  };
  t.after(() => sockets.forEach((s) => s.destroy()));
  const oldest = bounds.admit(fromDoor(), '192.0.2.2');
  const [busy1, busy2] = [bounds.admit(fromDoor(), '192.0.2.1'), bounds.admit(fromDoor(), '192.0.2.1')];
  bounds.admit(fromDoor(), '192.0.2.3');
  assert.equal(busy1.socket.destroyed, true, 'the busiest client kept its oldest connection');
  assert.equal(oldest.socket.destroyed, false, 'a client with one waiting connection was closed for another');
  assert.equal(busy2.socket.destroyed, false);
});
