// kube-apiserver dials a kubelet by its node's name (--kubelet-preferred-address-types Hostname
// first). The name goes to the agent whose certificate is that node; a kctl worker's agent takes it
// to its own kubelet (node-name/1), any other agent of that node is sent the node's address in its
// place, and one that holds no address gets a dial error that says so.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { dialViaProxy } from '../../../src/konnectivity/client.ts';
import { packets } from '../../../src/konnectivity/wire/protocol.ts';
import { echoServer, makePki, rawAgent, readN, startAgent, startServer, udsOf } from './fixtures.ts';
import { waitFor } from '../../wait.ts';

test("a dial to a node name reaches the address that node's kctl agent maps it to, and the server agrees to node-name/1", async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { proxyStrategies: ['destHost'] });
  const echo = await echoServer(t);
  // The name does not resolve anywhere: only the agent's map can take it to the echo server.
  const agent = await startAgent(t, pki, [server], { agentId: 'edge-7', localNames: { 'edge-7': '127.0.0.1' } });
  const snap = await waitFor('agent listed', 10_000, () => server.snapshot().agents[0]);
  assert.deepEqual(snap.extensions, ['flow-control/1', 'node-name/1']);
  // The agent's own snapshot says the same of that server.
  const own = await waitFor('the agent connected', 10_000, () => agent.snapshot().servers[0]);
  assert.deepEqual(own.extensions, ['flow-control/1', 'node-name/1']);

  const tunnel = await dialViaProxy({ udsPath: udsOf(server).grpc, address: `EDGE-7:${echo.port}` });
  tunnel.write('by name');
  assert.equal((await readN(tunnel, 7)).toString(), 'by name');
  tunnel.destroy();
});

test('only the names the agent was given are mapped: a name an object has by inheritance is looked up as any other', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { proxyStrategies: ['destHost', 'default'] });
  const agent = await startAgent(t, pki, [server], { agentId: 'edge-8', localNames: { 'edge-8': '127.0.0.1' } });
  await waitFor('agent listed', 10_000, () => server.snapshot().agents.length === 1);
  await assert.rejects(
    dialViaProxy({ udsPath: udsOf(server).grpc, address: 'constructor.invalid:80' }),
    /lookup constructor\.invalid/,
  );
  await assert.rejects(dialViaProxy({ udsPath: udsOf(server).grpc, address: 'constructor:80' }), /lookup constructor/);
  assert.equal(agent.snapshot().servers.length, 1, 'the agent lost its server');
});

test("an agent without node-name/1 is sent its node's own address for its name; with no address the dial fails saying why", async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { proxyStrategies: ['destHost'] });
  // As an upstream agent or an older kctl worker: no extensions, its address in its identifiers.
  const old = await rawAgent(t, pki, server, { agentId: 'old-1', identifiers: 'host=old-1&ipv4=10.9.8.7' });
  await waitFor('agent listed', 10_000, () => server.snapshot().agents.length === 1);
  assert.deepEqual(old.headers.get('kctl-extensions'), []);
  const dial = dialViaProxy({ udsPath: udsOf(server).grpc, address: 'old-1:10250' });
  const req = await old.next('DIAL_REQ');
  assert.equal(req.dialRequest?.address, '10.9.8.7:10250', 'the name became the address the agent holds for its node');
  old.send(packets.dialRsp(req.dialRequest?.random ?? '', '1'));
  (await dial).destroy();

  // A dial to an address goes as it came; only the node's own name is replaced.
  const byIp = dialViaProxy({ udsPath: udsOf(server).grpc, address: '10.9.8.7:10250' });
  const req2 = await old.next('DIAL_REQ');
  assert.equal(req2.dialRequest?.address, '10.9.8.7:10250');
  old.send(packets.dialRsp(req2.dialRequest?.random ?? '', '2'));
  (await byIp).destroy();

  await rawAgent(t, pki, server, { agentId: 'bare-2', identifiers: 'host=bare-2' });
  await waitFor('second agent listed', 10_000, () => server.snapshot().agents.length === 2);
  await assert.rejects(
    dialViaProxy({ udsPath: udsOf(server).grpc, address: 'bare-2:10250' }),
    /the agent of node bare-2 cannot dial its node's name \(an older kctl worker or an upstream agent\) and holds no address of it$/,
  );
});
