// kctl server <-> kctl agent end to end: bytes through the GRPC frontend (as kube-apiserver
// sends them) and through HTTP-CONNECT, and the answers a client gets when a dial cannot work.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { stat } from 'node:fs/promises';
import { connect } from 'node:net';
import { test } from 'node:test';
import { dialViaProxy } from '../../../src/konnectivity/client.ts';
import { echoServer, makePki, readAll, readN, startAgent, startServer, udsOf } from './fixtures.ts';
import { waitFor } from '../../wait.ts';

test('bytes travel both ways through the GRPC frontend, and a close reaches the target', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki);
  const agent = await startAgent(t, pki, [server]);
  await waitFor('agent connected', 10_000, () => server.snapshot().agents.length === 1);
  const echo = await echoServer(t);
  // Only kube-apiserver (same user) may dial through the server.
  for (const sock of Object.values(udsOf(server))) assert.equal((await stat(sock)).mode & 0o777, 0o600, sock);

  const tunnel = await dialViaProxy({ udsPath: udsOf(server).grpc, address: echo.address });
  const payload = randomBytes(3 * 1024 * 1024 + 17);
  tunnel.write(payload);
  const back = await readN(tunnel, payload.length);
  assert.ok(back.equals(payload), 'echoed bytes differ');
  assert.equal(server.snapshot().establishedConnections, 1);
  assert.equal(agent.snapshot().servers[0]?.connections, 1);
  tunnel.end();
  await waitFor('target socket closed', 10_000, () => echo.sockets.size === 0);
  await waitFor(
    'tables empty',
    10_000,
    () =>
      server.snapshot().establishedConnections === 0 &&
      server.snapshot().closingConnections === 0 &&
      agent.snapshot().servers[0]?.connections === 0,
  );
});

test('the target closing ends the tunnel with CLOSE_RSP', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki);
  await startAgent(t, pki, [server]);
  await waitFor('agent connected', 10_000, () => server.snapshot().agents.length === 1);
  const { listen } = await import('./fixtures.ts');
  const hello = await listen(t, (s) => s.end('hello and goodbye'));
  const tunnel = await dialViaProxy({ udsPath: udsOf(server).grpc, address: hello.address });
  const all = await readAll(tunnel);
  assert.equal(all.toString(), 'hello and goodbye');
  await waitFor('tables empty', 10_000, () => server.snapshot().establishedConnections === 0);
});

test('HTTP-CONNECT: 200 after the dial, bytes both ways; 405 for other methods', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki);
  await startAgent(t, pki, [server]);
  await waitFor('agent connected', 10_000, () => server.snapshot().agents.length === 1);
  const echo = await echoServer(t);

  const s = connect(udsOf(server).connect);
  s.write(`CONNECT ${echo.address} HTTP/1.1\r\nHost: ${echo.address}\r\n\r\n`);
  const head = await readN(s, 'HTTP/1.1 200 Connection Established\r\n\r\n'.length);
  assert.equal(head.toString(), 'HTTP/1.1 200 Connection Established\r\n\r\n');
  const payload = randomBytes(1024 * 1024);
  s.write(payload);
  s.resume();
  const back = await readN(s, payload.length);
  assert.ok(back.equals(payload));
  s.end();
  await waitFor(
    'tables empty',
    10_000,
    () => server.snapshot().establishedConnections === 0 && server.snapshot().closingConnections === 0,
  );

  const g = connect(udsOf(server).connect);
  g.end('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
  const rsp = (await readAll(g)).toString();
  assert.match(rsp, /^HTTP\/1\.1 405 /);
});

test('a taken agent port fails start with a clear error and leaves no socket behind', async (t) => {
  const pki = await makePki();
  const first = await startServer(t, pki);
  const { KonnectivityServer } = await import('../../../src/konnectivity/server/server.ts');
  const { quietLogger } = await import('./fixtures.ts');
  const { tempDir } = await import('../../helpers.ts');
  const { existsSync } = await import('node:fs');
  const dir = await tempDir(t);
  const second = new KonnectivityServer({
    udsPath: `${dir}/k.sock`,
    agentBindAddress: '127.0.0.1',
    agentPort: first.agentPort(),
    tls: { cert: pki.serverCert, key: pki.serverKey, ca: pki.ca },
    log: quietLogger(),
  });
  await assert.rejects(
    second.start(),
    new RegExp(`konnectivity server cannot listen on 127\\.0\\.0\\.1:${first.agentPort()}`),
  );
  assert.equal(second.status().state, 'failed');
  assert.equal(existsSync(`${dir}/k.sock`), false);
});
