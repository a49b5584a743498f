// The node's end of relaying through the controllers, on real UDP sockets: two nodes' relays joined
// by a fake link (the controllers), each in front of a UDP socket playing wireguard-go.
import assert from 'node:assert/strict';
import { createSocket, type Socket } from 'node:dgram';
import { once } from 'node:events';
import { test } from 'node:test';
import { ControllerRelay } from '../../../src/worker/controller-relay.ts';
import { quietLogger } from '../konnectivity/fixtures.ts';

async function fakeWireguard(t: {
  after(fn: () => void): void;
}): Promise<{ socket: Socket; port: number; got: { data: string; from: number }[] }> {
  const socket = createSocket('udp4');
  socket.bind(0, '127.0.0.1');
  await once(socket, 'listening');
  t.after(() => socket.close());
  const got: { data: string; from: number }[] = [];
  socket.on('message', (m, r) => got.push({ data: m.toString(), from: r.port }));
  return { socket, port: socket.address().port, got };
}

const until = async (what: string, ok: () => boolean): Promise<void> => {
  for (let i = 0; i < 200 && !ok(); i++) await new Promise((r) => setTimeout(r, 10));
  assert.ok(ok(), what);
};

test("what wireguard-go sends to a peer's local endpoint reaches the peer's wireguard-go, and the answer comes back the same way", async (t) => {
  const [wgA, wgB] = [await fakeWireguard(t), await fakeWireguard(t)];
  const relays: Record<string, ControllerRelay> = {};
  const sent: string[] = [];
  // The controllers: what a node sends arrives at the other node, named as its sender.
  const link = (self: string) => ({
    send: (toNode: string, data: Buffer) => {
      sent.push(`${self}->${toNode}`);
      relays[toNode]?.deliver(self, data);
      return true;
    },
  });
  relays.a = new ControllerRelay(link('a'), quietLogger());
  relays.b = new ControllerRelay(link('b'), quietLogger());
  t.after(() => Object.values(relays).forEach((r) => r.close()));
  relays.a.update(['b'], wgA.port);
  relays.b.update(['a'], wgB.port);

  const endpointOfB = await relays.a.endpointFor('b');
  assert.match(endpointOfB, /^127\.0\.0\.1:\d+$/);
  assert.equal(relays.a.owns(endpointOfB), true);
  const [, port] = endpointOfB.split(':');
  wgA.socket.send('handshake for b', Number(port), '127.0.0.1');
  await until('b got it', () => wgB.got.length === 1);
  assert.equal(wgB.got[0]!.data, 'handshake for b');
  // wireguard-go answers where the packet came from: b's socket for a.
  wgB.socket.send('response for a', wgB.got[0]!.from, '127.0.0.1');
  await until('a got the answer', () => wgA.got.length === 1);
  assert.deepEqual(wgA.got[0], { data: 'response for a', from: Number(port) });
  assert.deepEqual(sent, ['a->b', 'b->a']);
});

test('nothing but wireguard-go goes out, and nothing from a node that is not a peer comes in', async (t) => {
  const wg = await fakeWireguard(t);
  const sent: string[] = [];
  const relay = new ControllerRelay({ send: (to) => sent.push(to) > 0 }, quietLogger());
  t.after(() => relay.close());
  relay.update(['b'], wg.port);
  const [, port] = (await relay.endpointFor('b')).split(':');
  const stranger = createSocket('udp4');
  t.after(() => stranger.close());
  stranger.send('not from wireguard-go', Number(port), '127.0.0.1');
  relay.deliver('x', Buffer.from('from a node that is no peer'));
  relay.deliver('b', Buffer.from('from b'));
  await until('b delivered', () => wg.got.length === 1);
  await new Promise((r) => setTimeout(r, 100));
  assert.deepEqual(sent, []);
  assert.deepEqual(
    wg.got.map((g) => g.data),
    ['from b'],
  );
  // b is no longer a peer: its socket closes, and nothing of b's is delivered.
  relay.update([], wg.port);
  assert.equal(relay.owns(`127.0.0.1:${port}`), false);
  relay.deliver('b', Buffer.from('late'));
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(wg.got.length, 1);
});
