// Dials that wait for their agent (server/waiting-dials.ts): a restarted controller's
// kube-apiserver asks for dials before the agents are back.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { test } from 'node:test';
import { dialViaProxy } from '../../../src/konnectivity/client.ts';
import { packets } from '../../../src/konnectivity/wire/protocol.ts';
import { makePki, rawAgent, startServer, udsOf } from './fixtures.ts';
import { waitFor } from '../../wait.ts';

const expectedHosts = (hosts: string[]) => (host: string) => hosts.includes(host);

test('a dial nobody expects an agent for fails at once; one whose agent does not come fails after the wait, saying so', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, {
    serverId: 'ctrl-w',
    dialWait: { expected: expectedHosts(['127.0.0.1']), waitMs: 300 },
  });
  const uds = udsOf(server);
  await assert.rejects(
    dialViaProxy({ udsPath: uds.grpc, address: '127.0.0.2:10250' }),
    /^ProxyDialError: No agent available: no agent is connected to konnectivity server ctrl-w$/,
  );
  await assert.rejects(
    dialViaProxy({ udsPath: uds.grpc, address: '127.0.0.1:10250' }),
    /^ProxyDialError: No agent available: no agent is connected to konnectivity server ctrl-w \(waited \d+\.\d s for its agent\)$/,
  );
  assert.equal(server.snapshot().pendingDials, 0);
});

test('a waiting dial goes to its agent when it connects; a wait the client gave up (either frontend) dials nothing', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, {
    dialWait: { expected: expectedHosts(['127.0.0.1']), waitMs: 60_000 },
  });
  const uds = udsOf(server);
  const pending = () => server.snapshot().pendingDials;

  // HTTP-CONNECT: the client goes away while its dial waits.
  const s = connect(uds.connect);
  s.write('CONNECT 127.0.0.1:10250 HTTP/1.1\r\nHost: 127.0.0.1:10250\r\n\r\n');
  await waitFor('the CONNECT waits', 10_000, async () => pending() === 1);
  s.destroy();
  await waitFor('the CONNECT no longer waits', 10_000, async () => pending() === 0);

  // GRPC: the client cancels (DIAL_CLS) while its dial waits.
  const abort = new AbortController();
  const cancelled = dialViaProxy({ udsPath: uds.grpc, address: '127.0.0.1:10250', signal: abort.signal });
  await waitFor('the GRPC dial waits', 10_000, async () => pending() === 1);
  abort.abort();
  await assert.rejects(cancelled, /cancelled/);
  await waitFor('the GRPC dial no longer waits', 10_000, async () => pending() === 0);

  // This one waits until the agent connects, and then goes to it.
  const dial = dialViaProxy({ udsPath: uds.grpc, address: '127.0.0.1:10250', random: '424242' });
  await waitFor('the dial waits', 10_000, async () => pending() === 1);
  const agent = await rawAgent(t, pki, server);
  const req = await agent.next('DIAL_REQ');
  assert.equal(req.dialRequest?.random, '424242', 'a dial the client gave up reached the agent');
  assert.equal(req.dialRequest?.address, '127.0.0.1:10250');
  agent.send(packets.dialRsp('424242', '7'));
  const tunnel = await dial;
  t.after(() => tunnel.destroy());
  await assert.rejects(agent.next('DIAL_REQ', 500), 'a second dial reached the agent');
});
