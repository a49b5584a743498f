// Dials that cannot complete: what the client hears, and that nothing is left behind
// (ANP#126 pending dials, ANP#276/#404 DIAL_CLS vs DIAL_RSP races, stray packets).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { connect } from 'node:net';
import { test, type TestContext } from 'node:test';
import { dialViaProxy } from '../../../src/konnectivity/client.ts';
import { reasonPhrase } from '../../../src/konnectivity/server/frontends.ts';
import { packets, type Packet } from '../../../src/konnectivity/wire/protocol.ts';
import { captureLogger } from '../../helpers.ts';
import { echoServer, makePki, rawAgent, readAll, readN, startAgent, startServer, udsOf } from './fixtures.ts';
import { waitFor } from '../../wait.ts';

const root = new URL('../../..', import.meta.url).pathname;

async function httpConnect(path: string, address: string): Promise<string> {
  const s = connect(path);
  s.write(`CONNECT ${address} HTTP/1.1\r\nHost: ${address}\r\n\r\n`);
  return (await readAll(s)).toString();
}

/** A server, a raw (test-driven) agent, and one tunnel the agent accepted as `connectID`. */
async function establishedThroughRawAgent(t: TestContext, connectID: string) {
  const pki = await makePki();
  const server = await startServer(t, pki);
  const agent = await rawAgent(t, pki, server);
  await waitFor('agent', 10_000, () => server.snapshot().agents.length === 1);
  const dial = dialViaProxy({ udsPath: udsOf(server).grpc, address: '127.0.0.1:10250' });
  const req = await agent.next('DIAL_REQ');
  agent.send(packets.dialRsp(req.dialRequest?.random ?? '', connectID));
  return { server, agent, tunnel: await dial };
}

async function get(port: number, path: string): Promise<{ status: number; body: string }> {
  const r = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: r.status, body: await r.text() };
}

test('no agent: "No agent available" on both frontends, and /readyz says so', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { serverId: 'ctrl-x' });
  const uds = udsOf(server);
  await assert.rejects(
    dialViaProxy({ udsPath: uds.grpc, address: '127.0.0.1:10250' }),
    /^ProxyDialError: No agent available: no agent is connected to konnectivity server ctrl-x$/,
  );
  const rsp = await httpConnect(uds.connect, '127.0.0.1:10250');
  // kube-apiserver shows only the status line of a failed CONNECT, so it says why.
  assert.match(rsp, /^HTTP\/1\.1 500 No agent available: no agent is connected to konnectivity server ctrl-x\r\n/);
  assert.match(rsp, /\r\n\r\ncurrently no tunnels available: No agent available/);
  assert.deepEqual(await get(server.adminPort(), '/healthz'), { status: 200, body: 'ok' });
  assert.deepEqual(await get(server.adminPort(), '/readyz'), { status: 500, body: 'no connection to any proxy agent' });
  await rawAgent(t, pki, server);
  await waitFor('readyz ok', 10_000, async () => (await get(server.adminPort(), '/readyz')).status === 200);
  const metrics = (await get(server.adminPort(), '/metrics')).body;
  assert.match(metrics, /konnectivity_network_proxy_server_dial_failure_count\{reason="no_agent"\} 2/);
  assert.match(metrics, /konnectivity_network_proxy_server_ready_backend_connections 1/);
});

test("agent dial errors: the agent's error text over GRPC, and as a 502's reason phrase over HTTP-CONNECT", async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki);
  await startAgent(t, pki, [server]);
  await waitFor('agent', 10_000, () => server.snapshot().agents.length === 1);
  const closed = await echoServer(t);
  closed.server.close(); // nothing listens there any more
  await new Promise((r) => setTimeout(r, 50));
  await assert.rejects(
    dialViaProxy({ udsPath: udsOf(server).grpc, address: closed.address }),
    new RegExp(`dial tcp ${closed.address}: connect: connection refused`),
  );
  assert.match(
    await httpConnect(udsOf(server).connect, closed.address),
    new RegExp(`^HTTP/1\\.1 502 dial tcp ${closed.address}: connect: connection refused\\r\\n`),
  );
});

test('an agent that does not answer: the dial times out (504 over HTTP-CONNECT), and a late DIAL_RSP is closed', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { dialTimeoutMs: 300 });
  const agent = await rawAgent(t, pki, server);
  await waitFor('agent', 10_000, () => server.snapshot().agents.length === 1);
  await assert.rejects(
    dialViaProxy({ udsPath: udsOf(server).grpc, address: '127.0.0.1:9', random: '4611686018427387905' }),
    /timed out after 300 ms waiting for agent system:node:raw-1/,
  );
  const req = await agent.next('DIAL_REQ');
  assert.equal(req.dialRequest?.random, '4611686018427387905');
  const cls = await agent.next('DIAL_CLS');
  assert.equal(cls.closeDial?.random, '4611686018427387905', 'the agent is told to give up the dial');
  agent.send(packets.dialRsp('4611686018427387905', '77'));
  const close = await agent.next('CLOSE_REQ');
  assert.equal(close.closeRequest?.connectID, '77', 'the late connection is closed on the agent');
  assert.match(
    await httpConnect(udsOf(server).connect, '127.0.0.1:9'),
    /^HTTP\/1\.1 504 [^\r\n]*timed out after 300 ms waiting for agent system:node:raw-1\r\n/,
  );
  assert.equal(server.snapshot().pendingDials, 0);
  assert.equal(server.snapshot().establishedConnections, 0);
});

test('a client that gives up a dial (DIAL_CLS) leaves nothing behind, even when DIAL_RSP crosses it', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki);
  const agent = await rawAgent(t, pki, server);
  await waitFor('agent', 10_000, () => server.snapshot().agents.length === 1);
  const ac = new AbortController();
  const dial = dialViaProxy({ udsPath: udsOf(server).grpc, address: '127.0.0.1:9', signal: ac.signal });
  const req = await agent.next('DIAL_REQ');
  assert.equal(server.snapshot().pendingDials, 1);
  ac.abort();
  await assert.rejects(dial, /cancelled/);
  const cls = await agent.next('DIAL_CLS');
  assert.equal(cls.closeDial?.random, req.dialRequest?.random);
  await waitFor('no pending dial', 10_000, () => server.snapshot().pendingDials === 0);
  agent.send(packets.dialRsp(req.dialRequest?.random ?? '', '5'));
  assert.equal((await agent.next('CLOSE_REQ')).closeRequest?.connectID, '5');
  assert.equal(server.snapshot().establishedConnections, 0);

  // The client's stream just goes away while the dial is pending: DIAL_CLS as well.
  const ac2 = new AbortController();
  const { openProxyStream } = await import('../../../src/konnectivity/client.ts');
  const raw = openProxyStream(udsOf(server).grpc);
  raw.call.on('error', () => {});
  raw.call.write(packets.dialReq('127.0.0.1:9', '12345'));
  await agent.next('DIAL_REQ');
  raw.call.cancel();
  raw.client.close();
  assert.equal((await agent.next('DIAL_CLS')).closeDial?.random, '12345');
  await waitFor('no pending dial', 10_000, () => server.snapshot().pendingDials === 0);
  ac2.abort();
});

test('a pending dial fails at once when its agent is killed (SIGKILL), not at the dial timeout', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { dialTimeoutMs: 120_000 });
  const creds = await pki.nodeCert('doomed');
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/unit/konnectivity/fixtures/silent-agent.ts'], {
    cwd: root,
    env: {
      ...process.env,
      KNP_PORT: String(server.agentPort()),
      KNP_CA: pki.ca,
      KNP_CERT: creds.cert,
      KNP_KEY: creds.key,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  t.after(() => {
    child.kill('SIGKILL');
  });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  await waitFor(
    'child agent connected',
    30_000,
    () => out.includes('CONNECTED') && server.snapshot().agents.length === 1,
  );
  const dial = dialViaProxy({ udsPath: udsOf(server).grpc, address: '127.0.0.1:10250' });
  await waitFor('dial reached the agent', 10_000, () => out.includes('DIAL'));
  child.kill('SIGKILL');
  await assert.rejects(dial, /agent system:node:doomed disconnected before answering the dial to 127\.0\.0\.1:10250/);
  assert.equal(server.snapshot().pendingDials, 0);
  assert.equal(server.snapshot().agents.length, 0);
});

test('agent stream ends: every tunnel on it gets CLOSE_RSP; stray packets get a close back', async (t) => {
  const { server, agent, tunnel } = await establishedThroughRawAgent(t, '1');
  agent.send(packets.data('1', Buffer.from('hi')));
  assert.equal((await readN(tunnel, 2)).toString(), 'hi');
  tunnel.resume();

  // Stray DATA for an id the server does not know: CLOSE_REQ back, nothing else breaks.
  agent.send(packets.data('999', Buffer.from('x')));
  assert.equal((await agent.next('CLOSE_REQ')).closeRequest?.connectID, '999');
  // The tunnel still works after the stray packet.
  tunnel.write('ping');
  const data = await agent.next('DATA');
  assert.equal(data.data?.data.toString(), 'ping');

  agent.close();
  await once(tunnel, 'end');
  assert.match(tunnel.closeError ?? '', /agent system:node:raw-1 disconnected/);
  await waitFor(
    'tables empty',
    10_000,
    () => server.snapshot().establishedConnections === 0 && server.snapshot().agents.length === 0,
  );
});

test('a client that sends DATA for another connection id gets CLOSE_RSP for it, and the tunnel is closed', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki);
  const agent = await rawAgent(t, pki, server);
  await waitFor('agent', 10_000, () => server.snapshot().agents.length === 1);
  const { openProxyStream } = await import('../../../src/konnectivity/client.ts');
  const { client, call } = openProxyStream(udsOf(server).grpc);
  t.after(() => {
    call.cancel();
    client.close();
  });
  call.on('error', () => {});
  const got: Packet[] = [];
  call.on('data', (p) => got.push(p));
  call.write(packets.dialReq('127.0.0.1:10250', '42'));
  await agent.next('DIAL_REQ');
  agent.send(packets.dialRsp('42', '8'));
  await waitFor('DIAL_RSP', 10_000, () => got.some((p) => p.type === 'DIAL_RSP'));
  call.write(packets.data('9', Buffer.from('wrong id')));
  await waitFor('CLOSE_RSP for the stray id', 10_000, () =>
    got.find((p) => p.type === 'CLOSE_RSP' && p.closeResponse?.connectID === '9'),
  );
  assert.equal(
    (await agent.next('CLOSE_REQ')).closeRequest?.connectID,
    '8',
    "the stream's own connection is closed on the agent",
  );
  agent.send(packets.closeRsp('8'));
  await waitFor('CLOSE_RSP for the real id', 10_000, () =>
    got.find((p) => p.type === 'CLOSE_RSP' && p.closeResponse?.connectID === '8'),
  );
  await assert.rejects(agent.next('DATA', 200), /no DATA/, 'the stray bytes never reached the agent');
  await waitFor(
    'tables empty',
    10_000,
    () => server.snapshot().closingConnections === 0 && server.snapshot().establishedConnections === 0,
  );
});

test('a client that disappears from an established tunnel makes the server send CLOSE_REQ', async (t) => {
  const { server, agent, tunnel } = await establishedThroughRawAgent(t, '3');
  tunnel.destroy();
  assert.equal((await agent.next('CLOSE_REQ')).closeRequest?.connectID, '3');
  assert.equal(server.snapshot().closingConnections, 1);
  agent.send(packets.closeRsp('3'));
  await waitFor(
    'tables empty',
    10_000,
    () => server.snapshot().closingConnections === 0 && server.snapshot().establishedConnections === 0,
  );
});

test('DRAIN moves new dials to other agents; destHost picks the agent of the dialed node', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { dialTimeoutMs: 500 });
  const a = await rawAgent(t, pki, server, {
    agentId: 'node-a',
    creds: await pki.nodeCert('node-a'),
    identifiers: 'host=node-a&ipv4=10.0.0.1',
  });
  const b = await rawAgent(t, pki, server, {
    agentId: 'node-b',
    creds: await pki.nodeCert('node-b'),
    identifiers: 'host=node-b&ipv4=10.0.0.2',
  });
  await waitFor('two agents', 10_000, () => server.snapshot().agents.length === 2);
  const uds = udsOf(server).grpc;

  const toB = dialViaProxy({ udsPath: uds, address: '10.0.0.2:10250' }).catch(() => {});
  assert.equal((await b.next('DIAL_REQ')).dialRequest?.address, '10.0.0.2:10250');
  const toA = dialViaProxy({ udsPath: uds, address: 'node-a:10250' }).catch(() => {});
  // An agent without node-name/1 is sent its node's own address for its name.
  assert.equal((await a.next('DIAL_REQ')).dialRequest?.address, '10.0.0.1:10250');
  await Promise.all([toA, toB]);

  a.send(packets.drain());
  await waitFor(
    'a draining',
    10_000,
    () => server.snapshot().agents.find((x) => x.id === 'system:node:node-a')?.draining,
  );
  const dials = Array.from({ length: 8 }, () =>
    dialViaProxy({ udsPath: uds, address: 'example.internal:443' }).catch(() => {}),
  );
  for (let i = 0; i < 8; i++) await b.next('DIAL_REQ');
  await Promise.all(dials);
  await assert.rejects(a.next('DIAL_REQ', 200), /no DIAL_REQ/);
});

test('one trace id per dial appears in the server and the agent logs', async (t) => {
  const pki = await makePki();
  const serverLog = captureLogger();
  const agentLog = captureLogger();
  const server = await startServer(t, pki, { log: serverLog.log });
  await startAgent(t, pki, [server], { log: agentLog.log });
  await waitFor('agent', 10_000, () => server.snapshot().agents.length === 1);
  const echo = await echoServer(t);
  const tunnel = await dialViaProxy({ udsPath: udsOf(server).grpc, address: echo.address });
  tunnel.end('x');
  await readAll(tunnel);
  const sent = serverLog.lines().find((l) => l.msg === 'dial sent to agent');
  const trace = sent?.trace;
  assert.match(String(trace), /^[0-9a-f]{16}$/);
  const serverMsgs = serverLog
    .lines()
    .filter((l) => l.trace === trace)
    .map((l) => l.msg);
  const agentMsgs = agentLog
    .lines()
    .filter((l) => l.trace === trace)
    .map((l) => l.msg);
  assert.ok(serverMsgs.includes('tunnel established'), serverMsgs.join());
  assert.ok(agentMsgs.includes('dialing target') && agentMsgs.includes('target connected'), agentMsgs.join());
});

test('the reason phrase of a failed CONNECT is one printable line, whatever the error text', () => {
  assert.equal(reasonPhrase('dial tcp 10.0.0.5:10250: i/o timeout'), 'dial tcp 10.0.0.5:10250: i/o timeout');
  assert.equal(reasonPhrase('first line\r\nHTTP/1.1 200 OK\r\n\r\n'), 'first line HTTP/1.1 200 OK');
  assert.equal(reasonPhrase('caf\u00e9 \u00b5s\tgone'), 'caf s gone');
  assert.equal(reasonPhrase('\n'), 'dial failed');
  const long = reasonPhrase('x'.repeat(500));
  assert.equal(long.length, 200);
  assert.ok(long.endsWith('...'));
});
