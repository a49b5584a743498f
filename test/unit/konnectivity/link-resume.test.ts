// An agent that reconnects resumes its TLS session with the server instead of a full handshake:
// the server still knows the agent by its client certificate, and new credentials start afresh.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type TLSSocket } from 'node:tls';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { FRAME, LINK_ALPN, encodeFrame, metadataJson } from '../../../src/konnectivity/wire/link.ts';
import { openLink } from '../../../src/konnectivity/wire/link-calls.ts';
import { makePki } from './fixtures.ts';

interface Seen {
  reused: boolean;
  authorized: boolean;
  commonName: string;
}

test('a reconnect resumes the TLS session, keeps the client certificate and starts afresh with new credentials', async (t) => {
  const pki = await makePki();
  const seen: Seen[] = [];
  const server = createServer(
    {
      cert: pki.serverCert,
      key: pki.serverKey,
      ca: pki.ca,
      requestCert: true,
      rejectUnauthorized: true,
      ALPNProtocols: [LINK_ALPN],
    },
    (s: TLSSocket) => {
      const cert = s.getPeerCertificate();
      seen.push({ reused: s.isSessionReused(), authorized: s.authorized, commonName: String(cert.subject?.CN) });
      s.on('error', () => {});
      // HEADERS after the HELLO: the agent reads it after the session tickets, sent before it.
      s.once('data', () => s.write(encodeFrame(FRAME.HEADERS, metadataJson(new grpc.Metadata()))));
    },
  );
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => void server.close());
  const port = (server.address() as { port: number }).port;
  const [a, b] = [await pki.nodeCert('node-a'), await pki.nodeCert('node-b')];

  const connectAs = async (creds: { cert: string; key: string }) => {
    const link = await openLink(
      {
        host: '127.0.0.1',
        port,
        ca: Buffer.from(pki.ca),
        cert: Buffer.from(creds.cert),
        key: Buffer.from(creds.key),
        timeoutMs: 5_000,
      },
      new grpc.Metadata(),
    );
    assert.ok(link, 'the server chose kctl-tunnel/1');
    link.on('error', () => {});
    await once(link, 'metadata');
    link.end();
  };
  await connectAs(a);
  await connectAs(a);
  await connectAs(b);
  await connectAs(b);
  assert.deepEqual(seen, [
    { reused: false, authorized: true, commonName: 'system:node:node-a' },
    { reused: true, authorized: true, commonName: 'system:node:node-a' },
    { reused: false, authorized: true, commonName: 'system:node:node-b' },
    { reused: true, authorized: true, commonName: 'system:node:node-b' },
  ]);
});
