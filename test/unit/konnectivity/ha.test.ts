// HA without a load balancer (ANP#394, k0s#3783, #5503): an agent holds a stream to every
// listed server, also discovers servers behind one address, and notices dead links in seconds.
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { test } from 'node:test';
import { dialViaProxy } from '../../../src/konnectivity/client.ts';
import type { KonnectivityServer } from '../../../src/konnectivity/server/server.ts';
import { freePort } from '../../ports.ts';
import { echoServer, listen, makePki, readN, startAgent, startServer, udsOf } from './fixtures.ts';
import { waitFor } from '../../wait.ts';

/** A tiny TCP load balancer: round-robin per connection; freeze() black-holes open connections. */
async function roundRobin(t: Parameters<typeof listen>[0], backends: () => number[]) {
  let n = 0;
  const pairs: [Socket, Socket][] = [];
  const lb = await listen(t, (client) => {
    const ports = backends();
    const port = ports[n++ % ports.length] as number;
    const upstream = connect(port, '127.0.0.1');
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
    client.pipe(upstream);
    upstream.pipe(client);
    pairs.push([client, upstream]);
  });
  t.after(() => {
    for (const [a, b] of pairs) {
      a.destroy();
      b.destroy();
    }
  });
  return {
    port: lb.port,
    /** Open connections stop carrying bytes, without closing: a dead link. */
    freeze(): void {
      for (const [a, b] of pairs) {
        a.unpipe(b);
        b.unpipe(a);
        a.pause();
        b.pause();
      }
      pairs.length = 0;
    },
  };
}

async function echoThrough(server: KonnectivityServer, address: string): Promise<void> {
  const tn = await dialViaProxy({ udsPath: udsOf(server).grpc, address });
  tn.write('via ' + server.serverId);
  assert.equal((await readN(tn, 4 + server.serverId.length)).toString(), 'via ' + server.serverId);
  tn.destroy();
}

test('an agent given two server addresses holds a stream to both', async (t) => {
  const pki = await makePki();
  const s1 = await startServer(t, pki, { serverId: 'ctrl-1', serverCount: () => 2 });
  const s2 = await startServer(t, pki, { serverId: 'ctrl-2', serverCount: () => 2 });
  const agent = await startAgent(t, pki, [s1, s2]);
  await waitFor('both servers held', 10_000, () => agent.snapshot().servers.length === 2);
  assert.deepEqual(
    agent
      .snapshot()
      .servers.map((s) => s.serverId)
      .sort(),
    ['ctrl-1', 'ctrl-2'],
  );
  assert.equal(s1.snapshot().agents.length, 1);
  assert.equal(s2.snapshot().agents.length, 1);
  const echo = await echoServer(t);
  await echoThrough(s1, echo.address);
  await echoThrough(s2, echo.address);
  const metrics = await agent.metricsText();
  assert.match(metrics, /konnectivity_network_proxy_agent_open_server_connections 2/);
  assert.match(metrics, /konnectivity_network_proxy_agent_known_server_count 2/);

  // One controller goes away and comes back on the same port: the agent reconnects.
  const port2 = s2.agentPort();
  await s2.stop();
  await waitFor('ctrl-2 dropped', 10_000, () => agent.snapshot().servers.length === 1);
  await echoThrough(s1, echo.address);
  const s2b = await startServer(t, pki, { serverId: 'ctrl-2b', serverCount: () => 2, agentPort: port2 });
  await waitFor('ctrl-2b held', 15_000, () => agent.snapshot().servers.some((s) => s.serverId === 'ctrl-2b'));
  await echoThrough(s2b, echo.address);
});

test('an agent behind one address discovers servercount=2 servers and drops duplicates', async (t) => {
  const pki = await makePki();
  const s1 = await startServer(t, pki, { serverId: 'ctrl-1', serverCount: () => 2 });
  const s2 = await startServer(t, pki, { serverId: 'ctrl-2', serverCount: () => 2 });
  // Skewed on purpose: three of every four connections reach ctrl-1, so duplicates happen.
  const lb = await roundRobin(t, () => [s1.agentPort(), s1.agentPort(), s1.agentPort(), s2.agentPort()]);
  const agent = await startAgent(t, pki, [{ host: '127.0.0.1', port: lb.port }], {
    syncIntervalMs: 50,
    syncIntervalCapMs: 200,
  });
  await waitFor('both servers discovered', 20_000, () => agent.snapshot().servers.length === 2);
  assert.deepEqual(
    agent
      .snapshot()
      .servers.map((s) => s.serverId)
      .sort(),
    ['ctrl-1', 'ctrl-2'],
  );
  assert.equal(agent.snapshot().knownServerCount, 2);
  // Duplicates were dropped: each server sees the agent once.
  await waitFor(
    'one stream per server',
    10_000,
    () => s1.snapshot().agents.length === 1 && s2.snapshot().agents.length === 1,
  );
  const echo = await echoServer(t);
  await echoThrough(s1, echo.address);
  await echoThrough(s2, echo.address);
});

test('a dead link (no FIN, no RST) is noticed in seconds by both the agent and the server', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { serverId: 'ctrl-1', keepaliveTimeMs: 1_000, keepaliveTimeoutMs: 1_000 });
  const lb = await roundRobin(t, () => [server.agentPort()]);
  const agent = await startAgent(t, pki, [{ host: '127.0.0.1', port: lb.port }], {
    keepaliveTimeMs: 500,
    keepaliveTimeoutMs: 1_000,
  });
  await waitFor(
    'connected',
    10_000,
    () => agent.snapshot().servers.length === 1 && server.snapshot().agents.length === 1,
  );
  const firstConnectedAt = server.snapshot().agents[0]?.connectedAt;
  lb.freeze();
  // Both ends give up on the frozen connection, and the agent comes back on a fresh one.
  await waitFor('server dropped the silent agent and the agent reconnected', 20_000, () => {
    const agents = server.snapshot().agents;
    return agents.length === 1 && agents[0]?.connectedAt !== firstConnectedAt && agent.snapshot().servers.length === 1;
  });
  const echo = await echoServer(t);
  await echoThrough(server, echo.address);
});

test('an agent that reconnects before the server noticed its dead stream gets the dials on its fresh stream', async (t) => {
  const pki = await makePki();
  // The server notices silence only after 30 s; the agent after 4 s. (A worker's agent gives up
  // after 15 s of silence: its old stream is then long silent when the new one arrives.)
  const server = await startServer(t, pki, { serverId: 'ctrl-1', keepaliveTimeMs: 20_000, keepaliveTimeoutMs: 10_000 });
  const lb = await roundRobin(t, () => [server.agentPort()]);
  const agent = await startAgent(t, pki, [{ host: '127.0.0.1', port: lb.port }], {
    keepaliveTimeMs: 3_000,
    keepaliveTimeoutMs: 1_000,
  });
  await waitFor(
    'connected',
    10_000,
    () => agent.snapshot().servers.length === 1 && server.snapshot().agents.length === 1,
  );
  lb.freeze();
  // The agent reconnects about 5 s after the freeze (4 s of silence, checked every second, then a
  // 0.5-1 s backoff); the server drops the frozen stream only at 30 s. A machine busy with other
  // clusters has been seen to take past 10 s, so the wait is bounded by the server's 30 s, not the
  // agent's usual pace: two streams at any time before it show the reconnect came first.
  await waitFor(
    'the agent reconnected while the server still holds the frozen stream',
    25_000,
    () => server.snapshot().agents.length === 2,
  ).catch((err: unknown) => {
    throw new Error(
      `${String(err)}; agent: ${JSON.stringify(agent.status())}, server streams: ${server.snapshot().agents.length}`,
    );
  });
  // Upstream's rule (oldest stream first) would send this dial into the frozen stream, where it
  // would wait the whole dial timeout (10 s by default, longer than this test's wait).
  const echo = await echoServer(t);
  await echoThrough(server, echo.address);
});

test("a server the worker reaches again is dialed at once, not at the backoff's next turn", async (t) => {
  const pki = await makePki();
  const port = await freePort();
  // Nothing listens yet: the first attempt is refused and the next would come 30-60 s later.
  const agent = await startAgent(t, pki, [{ host: '127.0.0.1', port }], {
    syncIntervalMs: 60_000,
    syncIntervalCapMs: 60_000,
  });
  await waitFor('the first attempt failed', 10_000, () => agent.status().lastError);
  const server = await startServer(t, pki, { serverId: 'ctrl-1', agentPort: port });
  agent.retrySoon('127.0.0.1');
  await waitFor('connected long before the backoff ends', 10_000, () => agent.snapshot().servers.length === 1);
  assert.equal(server.snapshot().agents.length, 1);
});

test('a stream whose opening took longer than the keepalive bound is kept, not dropped at its first check', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { serverId: 'ctrl-1' });
  // A relay that holds each connection 1.5 s before passing it on: a SYN retried into a healed partition.
  const slow = await listen(t, (client) => {
    client.pause();
    setTimeout(() => {
      const upstream = connect(server.agentPort(), '127.0.0.1');
      upstream.on('error', () => client.destroy());
      client.on('error', () => upstream.destroy());
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
      client.pipe(upstream);
      upstream.pipe(client);
      client.resume();
    }, 1_500);
  });
  const agent = await startAgent(t, pki, [{ host: '127.0.0.1', port: slow.port }], {
    keepaliveTimeMs: 300,
    keepaliveTimeoutMs: 300,
  });
  await waitFor('connected', 10_000, () => agent.snapshot().servers.length === 1);
  const since = server.snapshot().agents[0]?.connectedAt;
  await new Promise((r) => setTimeout(r, 1_000));
  assert.equal(agent.snapshot().servers.length, 1, 'the agent dropped the stream it had just opened');
  assert.equal(server.snapshot().agents[0]?.connectedAt, since, 'the agent reconnected');
});

test('a dial to an agent gone silent fails at the dial timeout and says how long the agent has been silent', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { serverId: 'ctrl-1', dialTimeoutMs: 1_500 });
  const lb = await roundRobin(t, () => [server.agentPort()]);
  await startAgent(t, pki, [{ host: '127.0.0.1', port: lb.port }]);
  await waitFor('connected', 10_000, () => server.snapshot().agents.length === 1);
  lb.freeze();
  await new Promise((r) => setTimeout(r, 1_000));
  const echo = await echoServer(t);
  await assert.rejects(
    dialViaProxy({ udsPath: udsOf(server).grpc, address: echo.address }),
    /dial to 127\.0\.0\.1:\d+ timed out after 1500 ms waiting for agent system:node:node-1 \(nothing heard from it for [23] s\)/,
  );
});

test('the server list follows the cluster: a server added later is dialed at once, a removed one is dropped, no restart', async (t) => {
  const pki = await makePki();
  let count = 1;
  const s1 = await startServer(t, pki, { serverId: 'ctrl-1', serverCount: () => count });
  const agent = await startAgent(t, pki, [s1]);
  await waitFor('ctrl-1 held', 10_000, () => agent.snapshot().servers.length === 1);
  const echo = await echoServer(t);

  // A second controller joins: its lease makes the list grow, and the count with it.
  count = 2;
  const s2 = await startServer(t, pki, { serverId: 'ctrl-2', serverCount: () => count });
  const at = (s: KonnectivityServer) => ({ host: '127.0.0.1', port: s.agentPort() });
  agent.setServers([at(s1), at(s2)]);
  await waitFor('ctrl-2 held', 10_000, () => agent.snapshot().servers.some((s) => s.serverId === 'ctrl-2'));
  assert.equal(s2.snapshot().agents.length, 1);
  await echoThrough(s1, echo.address);
  await echoThrough(s2, echo.address);

  // ctrl-1 leaves the list (its lease is gone): the agent drains and closes its stream, and does
  // not dial it again although it still listens.
  count = 1;
  agent.setServers([at(s2)]);
  await waitFor('ctrl-1 dropped', 10_000, () => agent.snapshot().servers.every((s) => s.serverId === 'ctrl-2'));
  await waitFor('ctrl-1 has no agent', 10_000, () => s1.snapshot().agents.length === 0);
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(s1.snapshot().agents.length, 0, 'the agent dialed a removed server again');
  await echoThrough(s2, echo.address);
  // An empty list (the source is unreachable) keeps what the agent holds.
  agent.setServers([]);
  assert.equal(agent.snapshot().servers.length, 1);
});

test('an address listed twice (two pods behind one Service) is held to two servers, also when the one held counted one', async (t) => {
  const pki = await makePki();
  let count = 1;
  const backends = [() => s1.agentPort()];
  const s1 = await startServer(t, pki, { serverId: 'pod-1', serverCount: () => count });
  const lb = await roundRobin(t, () => backends.map((b) => b()));
  const shared = { host: '127.0.0.1', port: lb.port };
  const agent = await startAgent(t, pki, [shared], { syncIntervalMs: 50, syncIntervalCapMs: 200 });
  await waitFor('pod-1 held', 10_000, () => agent.snapshot().servers.length === 1);

  // A second pod behind the same address: its server counts two, but the stream held says one,
  // so nothing but the list (two leases naming one address) tells the agent to dial again.
  count = 2;
  const s2 = await startServer(t, pki, { serverId: 'pod-2', serverCount: () => count });
  backends.push(() => s2.agentPort());
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(s2.snapshot().agents.length, 0, 'the agent found pod-2 without being told');
  agent.setServers([shared, shared]);
  await waitFor('both pods held', 10_000, () => agent.snapshot().servers.length === 2);
  assert.deepEqual(
    agent
      .snapshot()
      .servers.map((x) => x.serverId)
      .sort(),
    ['pod-1', 'pod-2'],
  );
  const echo = await echoServer(t);
  await echoThrough(s1, echo.address);
  await echoThrough(s2, echo.address);

  // pod-2 goes (its lease with it): its stream ends and the one address is not dialed again.
  count = 1;
  backends.pop();
  agent.setServers([shared]);
  await s2.stop();
  await waitFor('pod-2 dropped', 10_000, () => agent.snapshot().servers.length === 1);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(s1.snapshot().agents.length, 1, 'pod-1 sees the agent more than once');
  await echoThrough(s1, echo.address);
});

test('an agent holding streams to several servers answers each dial on the stream of the server that dialed', async (t) => {
  const pki = await makePki();
  const servers = [
    await startServer(t, pki, { serverId: 'ctrl-a', serverCount: () => 3 }),
    await startServer(t, pki, { serverId: 'ctrl-b', serverCount: () => 3 }),
    await startServer(t, pki, { serverId: 'ctrl-c', serverCount: () => 3 }),
  ];
  const agent = await startAgent(t, pki, servers);
  await waitFor('three servers held', 10_000, () => agent.snapshot().servers.length === 3);
  const echo = await echoServer(t);
  for (const s of servers) {
    const tn = await dialViaProxy({ udsPath: udsOf(s).grpc, address: echo.address });
    tn.write('x');
    await readN(tn, 1);
    // The tunnel exists on this server's stream only.
    const open = agent.targetStats().map((x) => x.serverId);
    assert.deepEqual(open, [s.serverId], `open on ${open.join(',')} for a dial from ${s.serverId}`);
    tn.destroy();
    await waitFor('tunnel closed', 10_000, () => agent.targetStats().length === 0);
  }
});
