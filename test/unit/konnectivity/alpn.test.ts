// What the agent offers by ALPN: kctl-tunnel/1 before h2, and h2 alone (gRPC) once the server
// chose h2. --alpn-proto: exactly the given protocols before h2, for a proxy in front of the
// servers that routes by ALPN (no kctl-tunnel/1 then, the proxy would not know it).
import assert from 'node:assert/strict';
import { createServer } from 'node:tls';
import { test } from 'node:test';
import { KonnectivityAgent } from '../../../src/konnectivity/agent/agent.ts';
import { makePki, quietLogger, OWN_LOOPBACK } from './fixtures.ts';
import { waitFor } from '../../wait.ts';

/** The protocol lists of the agent's first `handshakes` TLS handshakes with a server that always picks h2. */
async function offeredBy(
  alpnProtocols: string[] | undefined,
  handshakes: number,
  extensions?: boolean,
): Promise<string[][]> {
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
  await new Promise<void>((r) => server.listen(0, OWN_LOOPBACK, r));
  const port = (server.address() as { port: number }).port;
  const agent = new KonnectivityAgent({
    servers: [{ host: OWN_LOOPBACK, port }],
    ca: pki.ca,
    ...(await pki.nodeCert('alpn-node')),
    agentId: 'alpn-node',
    alpnProtocols,
    extensions,
    syncIntervalMs: 100,
    log: quietLogger(),
  });
  await agent.start();
  try {
    return await waitFor(`${handshakes} TLS handshakes`, 10_000, () =>
      offered.length >= handshakes ? offered.slice(0, handshakes) : undefined,
    );
  } finally {
    await agent.stop({ drain: false });
    server.close();
  }
}

test('kctl-tunnel/1 is offered before h2, then gRPC uses h2 alone; --alpn-proto or extensions off: no kctl-tunnel/1', async () => {
  assert.deepEqual(await offeredBy(undefined, 2), [['kctl-tunnel/1', 'h2'], ['h2']]);
  assert.deepEqual(await offeredBy(['konnectivity', 'x-proxy'], 1), [['konnectivity', 'x-proxy', 'h2']]);
  assert.deepEqual(await offeredBy(undefined, 1, false), [['h2']]);
});
