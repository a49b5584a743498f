// Two TCP sockets relayed in the kernel by kctl's native addon (splice, as the front door does):
// with real loopback connections, Node's sockets are let go at once and the connections live on,
// bytes go both ways intact, one side's end reaches the other while the other way still flows, a
// side that reads nothing holds the other back, a reset ends the relay with its error, stop()
// ends both connections, idle connections hold no pipe, no relay or socket outlives its
// connections, and without the addon nothing is spliced.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { readdirSync, readlinkSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildNativeAddon } from '../../../assets/native/build.ts';
import { nativeAddon, useNativeAddon } from '../../../src/base/native.ts';
import { spliceSockets, type Relay } from '../../../src/base/splice.ts';
import { waitFor } from '../../wait.ts';

const MiB = 1024 * 1024;
let addonFile = '';
let addonDir = '';
let server: Server;
let port = 0;
const accepted: Socket[] = [];

before(async () => {
  addonDir = await mkdtemp(join(tmpdir(), 'kctl-native-'));
  addonFile = await buildNativeAddon(addonDir);
  useNativeAddon(addonFile);
  server = createServer({ allowHalfOpen: true }, (s) => accepted.push(s));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  port = (server.address() as { port: number }).port;
});
after(async () => {
  for (const s of accepted) s.destroy();
  server.close();
  useNativeAddon(null);
  await rm(addonDir, { recursive: true, force: true });
});

/**
 * The server's ends of the connections of `clients`, taken out of `accepted`. Matched by port:
 * with several callers at once, connections are accepted in any order.
 */
async function serverEnds(clients: Socket[]): Promise<Socket[]> {
  const endOf = (c: Socket) => accepted.find((s) => s.remotePort === c.localPort);
  await waitFor('both accepted', 5_000, () => clients.every((c) => endOf(c) !== undefined));
  const ends = clients.map((c) => endOf(c)!);
  for (const e of ends) accepted.splice(accepted.indexOf(e), 1);
  return ends;
}

/** Two clients `x` and `y`, and the server's ends of their connections `a` and `b`, relayed to each other. */
async function relayed(): Promise<{ x: Socket; y: Socket; a: Socket; b: Socket; relay: Relay }> {
  const clients = [0, 1].map(() => connect({ port, host: '127.0.0.1', allowHalfOpen: true }));
  for (const c of clients) c.on('error', () => undefined);
  await Promise.all(clients.map((c) => once(c, 'connect')));
  const [x, y] = clients as [Socket, Socket];
  const [a, b] = (await serverEnds(clients)) as [Socket, Socket];
  const relay = spliceSockets(a, b);
  assert.ok(relay, 'the addon took the pair');
  assert.ok(a.destroyed && b.destroyed, "Node's sockets are let go as the relay starts");
  return { x, y, a, b, relay };
}

/** Everything a socket receives until its end, hashed. */
function received(s: Socket): Promise<{ bytes: number; sha: string }> {
  const hash = createHash('sha256');
  let bytes = 0;
  s.on('data', (c: Buffer) => {
    bytes += c.length;
    hash.update(c);
  });
  return new Promise((resolve) => s.once('end', () => resolve({ bytes, sha: hash.digest('hex') })));
}

/** What a descriptor of this process is ("socket:[..]", "pipe:[..]"), or "" once closed. */
function linkOf(fd: string): string {
  try {
    return readlinkSync(`/proc/self/fd/${fd}`);
  } catch {
    return '';
  }
}

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

test('bytes go both ways intact, each way at once, and the relay ends when both sides have closed', async () => {
  const { x, y, relay } = await relayed();
  const [fromX, fromY] = [randomBytes(6 * MiB), randomBytes(4 * MiB)];
  const [atY, atX] = [received(y), received(x)];
  x.end(fromX);
  y.end(fromY);
  assert.deepEqual(await atY, { bytes: fromX.length, sha: sha(fromX) });
  assert.deepEqual(await atX, { bytes: fromY.length, sha: sha(fromY) });
  assert.deepEqual(await relay.done, { aToB: fromX.length, bToA: fromY.length });
});

test("one side's end reaches the other while the other way still flows (half-close)", async () => {
  const { x, y, relay } = await relayed();
  let settled = false;
  void relay.done.then(() => (settled = true));
  const atY = received(y);
  const atX = received(x);
  x.end('hello');
  assert.deepEqual(await atY, { bytes: 5, sha: sha(Buffer.from('hello')) });
  await sleep(100);
  assert.ok(!settled, 'the relay ended with one way still open');
  const late = randomBytes(2 * MiB);
  y.end(late);
  assert.deepEqual(await atX, { bytes: late.length, sha: sha(late) });
  assert.deepEqual(await relay.done, { aToB: 5, bToA: late.length });
});

test('a side that reads nothing holds the other back, and then gets every byte (backpressure)', async () => {
  const { x, y, relay } = await relayed();
  const big = randomBytes(64 * MiB);
  y.pause();
  x.end(big);
  // Once the kernel's buffers and the relay's pipe are full, the rest waits in x's Node.
  await waitFor('x held back', 5_000, () => x.writableLength > 0 && !x.writableFinished);
  await sleep(300);
  assert.ok(x.writableLength > 0, 'x sent everything to a side that reads nothing');
  const atY = received(y);
  y.resume();
  assert.deepEqual(await atY, { bytes: big.length, sha: sha(big) });
  y.end();
  assert.deepEqual(await relay.done, { aToB: big.length, bToA: 0 });
});

test('a reset on one side ends the relay with an error and closes the other side', async () => {
  const { x, y, relay } = await relayed();
  x.write('before');
  await once(y, 'data');
  const xEnded = once(x.resume(), 'end');
  y.resetAndDestroy();
  const result = await relay.done;
  assert.match(result.error ?? '', /reset/i);
  await xEnded;
});

test('stop() ends the relay and both connections', async () => {
  const { x, y, relay } = await relayed();
  const ended = [x, y].map((s) => once(s.resume(), 'end'));
  relay.stop();
  assert.equal((await relay.done).error, 'stopped');
  // The relay held the last descriptors: both clients see their connection end.
  await Promise.all(ended);
  relay.stop(); // after the end: nothing
});

test('idle relayed connections hold no pipe', async () => {
  const pipes = (): number => readdirSync('/proc/self/fd').filter((fd) => linkOf(fd).startsWith('pipe:')).length;
  const first = await relayed(); // the thread's pool may keep a pipe from the first bytes on
  first.x.write('warm');
  await once(first.y, 'data');
  const before = pipes();
  const idle = await Promise.all(Array.from({ length: 20 }, () => relayed()));
  await sleep(100);
  assert.ok(pipes() <= before + 2, `${pipes()} pipe descriptors with 20 idle pairs, ${before} before`);
  for (const r of [first, ...idle]) r.relay.stop();
  await Promise.all([first, ...idle].map((r) => r.relay.done));
});

test('no relay and no socket outlive 200 relayed connections, and pipes stay within the pool', async () => {
  const open = (kind: 'socket' | 'pipe'): number =>
    readdirSync('/proc/self/fd').filter((fd) => {
      return linkOf(fd).startsWith(`${kind}:`);
    }).length;
  // The relay thread's own descriptors (epoll, eventfd) come with the first relay: they stay.
  await (async () => {
    const { x, y, relay } = await relayed();
    x.end();
    y.end();
    await relay.done;
    await Promise.all([x, y].map((s) => (s.closed ? undefined : once(s, 'close'))));
  })();
  const before = { socket: open('socket'), pipe: open('pipe') };
  for (let round = 0; round < 10; round++) {
    const pairs = await Promise.all(Array.from({ length: 20 }, () => relayed()));
    await Promise.all(
      pairs.map(async ({ x, y, relay }, i) => {
        const at = received(y);
        x.end(`pair ${round}.${i}`);
        await at;
        y.end();
        await relay.done;
        await Promise.all([x, y].map((s) => (s.closed ? undefined : once(s, 'close'))));
      }),
    );
  }
  assert.equal(nativeAddon()!.relayCount(), 0);
  await waitFor('the sockets back to where they were', 5_000, () => open('socket') === before.socket, {
    log: () => `${open('socket')} sockets open, ${before.socket} before`,
  });
  // The thread keeps at most 64 empty pipes (two descriptors each) for the next flights.
  assert.ok(open('pipe') <= before.pipe + 128, `${open('pipe')} pipe descriptors, ${before.pipe} before`);
});

test('without the addon spliceSockets takes nothing and leaves the sockets to Node', async () => {
  const [x, y] = [0, 1].map(() => connect({ port, host: '127.0.0.1', allowHalfOpen: true })) as [Socket, Socket];
  await Promise.all([once(x, 'connect'), once(y, 'connect')]);
  const [a, b] = (await serverEnds([x, y])) as [Socket, Socket];
  useNativeAddon(null);
  try {
    assert.equal(spliceSockets(a, b), undefined);
  } finally {
    useNativeAddon(addonFile);
  }
  // Node still reads them: piped in JavaScript, the bytes pass.
  a.pipe(b);
  b.pipe(a);
  const atY = received(y);
  x.end('by pipe');
  assert.deepEqual(await atY, { bytes: 7, sha: sha(Buffer.from('by pipe')) });
  y.end();
  await Promise.all([x, y].map((s) => once(s, 'close')));
});
