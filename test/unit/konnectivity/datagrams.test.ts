// Datagrams between nodes through the server (spec.network.relay: controllers): real agents on
// both transports, the sender named by its certificate, a rate bound per node, and nothing relayed
// by a server that was not asked to.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { packets } from '../../../src/konnectivity/wire/protocol.ts';
import type { KonnectivityAgent } from '../../../src/konnectivity/agent/agent.ts';
import { makePki, rawAgent, startAgent, startServer } from './fixtures.ts';
import { waitFor } from '../../wait.ts';

type Got = { from: string; data: string }[];

/** The server's count of datagrams with this result. */
async function relayed(server: Awaited<ReturnType<typeof startServer>>, result: string): Promise<number> {
  const m = await server.metrics.registry.metrics();
  return Number(new RegExp(`kctl_konnectivity_relay_datagrams_total\\{result="${result}"\\} (\\d+)`).exec(m)?.[1] ?? 0);
}

async function nodeAgent(
  t: Parameters<typeof startAgent>[0],
  server: Awaited<ReturnType<typeof startServer>>,
  node: string,
  got: Got,
): Promise<KonnectivityAgent> {
  const pki = await makePki();
  const agent = await startAgent(t, pki, [server], {
    agentId: node,
    onDatagram: (from, data) => got.push({ from, data: data.toString() }),
  });
  await waitFor(`${node} connected`, 10_000, () => agent.snapshot().servers.length === 1);
  return agent;
}

test('a datagram from one node reaches the other, named by the sender certificate, both ways', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { datagramRelay: {} });
  const gotA: Got = [];
  const gotB: Got = [];
  const a = await nodeAgent(t, server, 'node-a', gotA);
  const b = await nodeAgent(t, server, 'node-b', gotB);
  assert.equal(a.sendDatagram('node-b', Buffer.from('hello b')), true);
  await waitFor('b got it', 10_000, () => gotB.length === 1);
  assert.deepEqual(gotB, [{ from: 'node-a', data: 'hello b' }]);
  b.sendDatagram('node-a', Buffer.from('hello a'));
  await waitFor('a got it', 10_000, () => gotA.length === 1);
  assert.deepEqual(gotA, [{ from: 'node-b', data: 'hello a' }]);
  const metrics = await server.metrics.registry.metrics();
  assert.match(metrics, /kctl_konnectivity_relay_datagrams_total\{result="forwarded"\} 2/);
  assert.match(metrics, /kctl_konnectivity_relay_bytes_total\{result="forwarded"\} 14/);
});

test('the sender cannot name itself: the server stamps the node its certificate names', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { datagramRelay: {} });
  const gotB: Got = [];
  await nodeAgent(t, server, 'node-b', gotB);
  // A raw stream with node-x's certificate; the packet says nothing about its sender, and a
  // forged "from" does not exist in the message: the node field is the destination.
  const raw = await rawAgent(t, pki, server, {
    agentId: 'node-x',
    creds: await pki.nodeCert('node-x'),
    extensions: true,
    transport: 'link',
  });
  raw.send(packets.datagram('node-b', Buffer.from('from x')));
  await waitFor('b got it', 10_000, () => gotB.length === 1);
  assert.deepEqual(gotB, [{ from: 'node-x', data: 'from x' }]);
  // To itself, or to a node with no agent: dropped and counted.
  raw.send(packets.datagram('node-x', Buffer.from('loop')));
  raw.send(packets.datagram('node-nobody', Buffer.from('lost')));
  await waitFor('drops counted', 10_000, async () => {
    const m = await server.metrics.registry.metrics();
    return /result="not_allowed"\} 1/.test(m) && /result="no_route"\} 1/.test(m);
  });
  assert.equal(gotB.length, 1);
});

test('a stream without kctl extensions, or a server not asked to relay, relays nothing', async (t) => {
  const pki = await makePki();
  const plain = await startServer(t, pki);
  const gotB: Got = [];
  const a = await nodeAgent(t, plain, 'node-a', []);
  await nodeAgent(t, plain, 'node-b', gotB);
  assert.equal(a.sendDatagram('node-b', Buffer.from('x')), true);

  const relaying = await startServer(t, pki, { datagramRelay: {} });
  const gotC: Got = [];
  await nodeAgent(t, relaying, 'node-c', gotC);
  const upstreamLike = await rawAgent(t, pki, relaying, {
    agentId: 'node-d',
    creds: await pki.nodeCert('node-d'),
    extensions: false,
  });
  upstreamLike.send(packets.datagram('node-c', Buffer.from('y')));
  await waitFor('refusal counted', 10_000, async () =>
    /result="not_allowed"\} 1/.test(await relaying.metrics.registry.metrics()),
  );
  // Give a wrongly relayed datagram time to arrive before saying none did.
  await new Promise((r) => setTimeout(r, 300));
  assert.deepEqual(gotB, []);
  assert.deepEqual(gotC, []);
  assert.doesNotMatch(await plain.metrics.registry.metrics(), /kctl_konnectivity_relay_datagrams_total\{/);
});

test('a node sends at most its rate: the rest is dropped and counted', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { datagramRelay: { rateBytesPerS: 100, burstBytes: 4_000 } });
  const gotB: Got = [];
  const a = await nodeAgent(t, server, 'node-a', []);
  await nodeAgent(t, server, 'node-b', gotB);
  const kib = Buffer.alloc(1_000, 1);
  for (let i = 0; i < 10; i++) a.sendDatagram('node-b', kib);
  const count = (result: string): Promise<number> => relayed(server, result);
  await waitFor(
    'all ten judged',
    10_000,
    async () => (await count('forwarded')) + (await count('rate_limited')) === 10,
  );
  const forwarded = await count('forwarded');
  // The burst (4), and one more only if the ten took 10 s to arrive (100 bytes per second refill): never all 10.
  assert.ok(forwarded >= 4 && forwarded <= 5, `${forwarded} of 10 relayed`);
  await waitFor('the relayed ones arrive', 10_000, () => gotB.length === forwarded);
});

test('a node holding two streams to the server shares one bound', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { datagramRelay: { rateBytesPerS: 100, burstBytes: 4_000 } });
  const gotB: Got = [];
  await nodeAgent(t, server, 'node-b', gotB);
  const creds = await pki.nodeCert('node-a');
  const first = await rawAgent(t, pki, server, { agentId: 'node-a', creds, extensions: true, transport: 'link' });
  const second = await rawAgent(t, pki, server, { agentId: 'node-a', creds, extensions: true, transport: 'link' });
  const kib = Buffer.alloc(1_000, 1);
  for (let i = 0; i < 5; i++) {
    first.send(packets.datagram('node-b', kib));
    second.send(packets.datagram('node-b', kib));
  }
  const count = (result: string): Promise<number> => relayed(server, result);
  await waitFor(
    'all ten judged',
    10_000,
    async () => (await count('forwarded')) + (await count('rate_limited')) === 10,
  );
  const forwarded = await count('forwarded');
  assert.ok(forwarded >= 4 && forwarded <= 5, `${forwarded} of 10 relayed from two streams of one node`);
});

test('many nodes sending to one share its bound: a flood through the server reaches a node at its rate at most', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { datagramRelay: { rateBytesPerS: 100, burstBytes: 4_000 } });
  const gotB: Got = [];
  const gotC: Got = [];
  await nodeAgent(t, server, 'node-b', gotB);
  await nodeAgent(t, server, 'node-c', gotC);
  const [x, y] = await Promise.all(['node-x', 'node-y'].map((n) => nodeAgent(t, server, n, [])));
  const kib = Buffer.alloc(1_000, 1);
  const count = (result: string): Promise<number> => relayed(server, result);
  // node-x spends node-b's whole burst; node-y, within its own bound, finds node-b's spent.
  for (let i = 0; i < 4; i++) x!.sendDatagram('node-b', kib);
  await waitFor("node-x's four arrive", 10_000, () => gotB.length === 4);
  for (let i = 0; i < 4; i++) y!.sendDatagram('node-b', kib);
  await waitFor(
    'all eight judged',
    10_000,
    async () => (await count('forwarded')) + (await count('rate_limited')) === 8,
  );
  assert.ok(gotB.length <= 5, `${gotB.length} of 8 reached node-b`);
  // What node-b could not take cost node-y nothing: its own burst still carries four to node-c.
  for (let i = 0; i < 4; i++) y!.sendDatagram('node-c', kib);
  await waitFor("node-y's four reach node-c", 10_000, () => gotC.length === 4);
});
