// --alpn-proto: the agent offers the extra ALPN protocols before h2 in its TLS handshake, for a
// proxy in front of the servers that routes by ALPN.
import assert from 'node:assert/strict';
import { createServer } from 'node:tls';
import { test } from 'node:test';
import { KonnectivityAgent } from '../../../src/konnectivity/agent.ts';
import { makePki, quietLogger, waitFor } from './fixtures.ts';

async function offeredBy(alpnProtocols: string[] | undefined): Promise<string[]> {
  const pki = await makePki();
  const offered: string[][] = [];
  const server = createServer({
    cert: pki.serverCert,
    key: pki.serverKey,
    ALPNCallback: ({ protocols }) => {
      offered.push(protocols);
      return 'h2';
    },
  });
  server.on('secureConnection', (s) => s.destroy());
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  const agent = new KonnectivityAgent({
    servers: [{ host: '127.0.0.1', port }],
    ca: pki.ca,
    ...(await pki.nodeCert('alpn-node')),
    agentId: 'alpn-node',
    alpnProtocols,
    syncIntervalMs: 100,
    log: quietLogger(),
  });
  await agent.start();
  try {
    return await waitFor('a TLS handshake', () => offered[0], 10_000);
  } finally {
    await agent.stop({ drain: false });
    server.close();
  }
}

test('--alpn-proto protocols are offered before h2; without it, h2 alone', async () => {
  assert.deepEqual(await offeredBy(['konnectivity', 'x-proxy']), ['konnectivity', 'x-proxy', 'h2']);
  assert.deepEqual(await offeredBy(undefined), ['h2']);
});
