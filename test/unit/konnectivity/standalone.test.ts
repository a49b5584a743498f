// What the standalone server (kctl konnectivity-server) adds to the in-process one: frontends on
// TCP with mutual TLS (GRPC and HTTP-CONNECT), upstream's agent authentication (any certificate
// of the CA, or nobody checked), upstream's readiness and ready_backends counting, and a
// graceful stop that waits for open connections.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect as tlsConnect } from 'node:tls';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { dialViaProxy } from '../../../src/konnectivity/client.ts';
import type { KonnectivityServer } from '../../../src/konnectivity/index.ts';
import { freePort } from '../../ports.ts';
import { echoServer, makePki, readN, startAgent, startServer, udsOf } from './fixtures.ts';
import { waitFor } from '../../wait.ts';

const agentsByStrategy = async (server: KonnectivityServer) =>
  (await server.metrics.registry.metrics())
    .split('\n')
    .filter((l) => l.startsWith('konnectivity_network_proxy_server_ready_backends{'))
    .sort();

test('TCP frontends with mutual TLS: GRPC and HTTP-CONNECT carry bytes for a client certificate of the CA, and refuse a client without one', async (t) => {
  const pki = await makePki();
  const client = await pki.clientCert({ commonName: 'kube-apiserver' });
  const tlsFiles = { cert: Buffer.from(pki.serverCert), key: Buffer.from(pki.serverKey), ca: Buffer.from(pki.ca) };
  const echo = await echoServer(t);
  for (const mode of ['grpc', 'http-connect'] as const) {
    const port = await freePort();
    const server = await startServer(t, pki, {
      udsPath: undefined,
      httpConnectUdsPath: undefined,
      tcpFrontend: { mode, host: '127.0.0.1', port, tls: tlsFiles },
      agentAuth: 'upstream',
    });
    await startAgent(t, pki, [server]);
    await waitFor('agent connected', 10_000, () => server.snapshot().agents.length === 1);
    if (mode === 'grpc') {
      const credentials = grpc.credentials.createSsl(tlsFiles.ca, Buffer.from(client.key), Buffer.from(client.cert));
      const tn = await dialViaProxy({
        udsPath: '',
        tcp: { address: `127.0.0.1:${port}`, credentials },
        address: echo.address,
      });
      tn.write('grpc over mTLS');
      assert.equal((await readN(tn, 14)).toString(), 'grpc over mTLS');
      tn.destroy();
      const anonymous = grpc.credentials.createSsl(tlsFiles.ca);
      await assert.rejects(
        dialViaProxy({
          udsPath: '',
          tcp: { address: `127.0.0.1:${port}`, credentials: anonymous },
          address: echo.address,
        }),
      );
    } else {
      const s = tlsConnect({ host: '127.0.0.1', port, ca: pki.ca, cert: client.cert, key: client.key });
      let got = '';
      s.on('data', (c: Buffer) => (got += c.toString()));
      await once(s, 'secureConnect');
      s.write(`CONNECT ${echo.address} HTTP/1.1\r\nHost: ${echo.address}\r\n\r\n`);
      await waitFor('200 Connection Established', 10_000, () => got === 'HTTP/1.1 200 Connection Established\r\n\r\n');
      s.write('connect over mTLS');
      await waitFor('the echo', 10_000, () => got.endsWith('\r\n\r\nconnect over mTLS'));
      s.destroy();
      // Without a client certificate the handshake fails: no tunnel, no answer.
      const anonymous = tlsConnect({ host: '127.0.0.1', port, ca: pki.ca });
      let answered = '';
      anonymous.on('data', (c: Buffer) => (answered += c.toString()));
      let refusal = '';
      anonymous.on('error', (err) => (refusal = err.message));
      anonymous.write(`CONNECT ${echo.address} HTTP/1.1\r\n\r\n`);
      await new Promise((r) => anonymous.once('close', r));
      assert.equal(answered, '', 'a client without a certificate got an answer');
      assert.match(refusal, /certificate required/);
    }
  }
});

test("upstream's agent rules: any certificate of the CA is an agent; readiness and ready_backends follow the first strategy", async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { agentAuth: 'upstream', proxyStrategies: ['destHost', 'default'] });
  assert.equal(server.notReadyReason(), 'no connection to any proxy agent');
  // Not a node certificate: kctl's own rule would refuse it, upstream's takes it.
  const other = await pki.clientCert({ commonName: 'konnectivity-agent' });
  await startAgent(t, pki, [server], {
    cert: other.cert,
    key: other.key,
    agentId: 'plain',
    identifiers: { host: [], ipv4: [], ipv6: [], cidr: [], defaultRoute: false },
  });
  await waitFor('agent connected', 10_000, () => server.snapshot().agents.length === 1);
  assert.deepEqual(
    server.snapshot().agents.map((a) => [a.id, a.auth, a.user]),
    [['plain', 'certificate', 'konnectivity-agent']],
  );
  // destHost comes first and this agent claims nothing: not ready, as upstream.
  assert.equal(server.notReadyReason(), 'no connection to any proxy agent');
  assert.deepEqual(await agentsByStrategy(server), [
    'konnectivity_network_proxy_server_ready_backends{proxy_strategy="default"} 1',
    'konnectivity_network_proxy_server_ready_backends{proxy_strategy="destHost"} 0',
  ]);
  await startAgent(t, pki, [server], {
    cert: other.cert,
    key: other.key,
    agentId: 'named',
    identifiers: { host: ['node-a'], ipv4: ['10.0.0.5'], ipv6: [], cidr: [], defaultRoute: false },
  });
  await waitFor('second agent connected', 10_000, () => server.snapshot().agents.length === 2);
  assert.equal(server.notReadyReason(), null);
  // destHost counts the names and addresses claimed, default the agents.
  assert.deepEqual(await agentsByStrategy(server), [
    'konnectivity_network_proxy_server_ready_backends{proxy_strategy="default"} 2',
    'konnectivity_network_proxy_server_ready_backends{proxy_strategy="destHost"} 2',
  ]);
});

test('without a CA and token review, upstream-style servers take any agent that completes TLS', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, {
    agentAuth: 'upstream',
    tls: { cert: pki.serverCert, key: pki.serverKey },
  });
  const foreign = await pki.foreignCa();
  const stranger = await pki.clientCert({ commonName: 'stranger', signer: foreign });
  await startAgent(t, pki, [server], { cert: stranger.cert, key: stranger.key, agentId: 'anyone' });
  await waitFor('agent connected', 10_000, () => server.snapshot().agents.length === 1);
  assert.equal(server.snapshot().agents[0]!.auth, 'none');
});

test('a graceful stop waits for the open tunnel to end, then stops', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki);
  await startAgent(t, pki, [server]);
  await waitFor('agent connected', 10_000, () => server.snapshot().agents.length === 1);
  const echo = await echoServer(t);
  const tn = await dialViaProxy({ udsPath: udsOf(server).grpc, address: echo.address });
  let echoed = '';
  tn.on('data', (c: Buffer) => (echoed += c.toString()));
  tn.write('hi');
  await waitFor('first echo', 10_000, () => echoed === 'hi');
  let stopped = false;
  const stopping = server.stopGracefully(60_000).then(() => (stopped = true));
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(stopped, false, 'stopped while a tunnel was open');
  tn.write('still');
  await waitFor('the open tunnel keeps working during a graceful stop', 10_000, () => echoed === 'histill');
  tn.destroy();
  await stopping;
  assert.equal(server.status().state, 'stopped');
});
