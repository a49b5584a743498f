// A worker's way out through an HTTP proxy: which hosts go through it (HTTPS_PROXY, NO_PROXY,
// loopback never), and real CONNECTs through a stand-in proxy (Node's http server): a raw
// connection, an https request with TLS inside the tunnel, and a proxy that says no.
import assert from 'node:assert/strict';
import { createServer as createHttpServer } from 'node:http';
import { request } from 'node:https';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { test } from 'node:test';
import { createServer as createTlsServer } from 'node:tls';
import { bypassed, connectThrough, proxiedHttps, proxyFor, proxySettingProblem } from '../../../src/base/proxy.ts';
import { makePki } from '../konnectivity/fixtures.ts';

test('HTTPS_PROXY applies to every host but loopback and what NO_PROXY names', () => {
  const env = { HTTPS_PROXY: 'http://proxy.example:3128', NO_PROXY: 'internal.example,.corp,10.1.0.0/16,192.0.2.9' };
  assert.equal(proxyFor('10.77.1.2', env)?.host, 'proxy.example:3128');
  for (const direct of ['127.0.0.1', 'localhost', '::1', 'internal.example', 'a.b.corp', '10.1.200.3', '192.0.2.9'])
    assert.equal(proxyFor(direct, env), undefined, direct);
  assert.equal(proxyFor('10.2.0.1', env)?.hostname, 'proxy.example');
  assert.equal(proxyFor('10.77.1.2', { https_proxy: 'proxy:8080' })?.port, '8080');
  assert.equal(proxyFor('10.77.1.2', {}), undefined);
  assert.equal(bypassed('x.example', '*'), true);
  assert.throws(() => proxyFor('10.77.1.2', { HTTPS_PROXY: 'https://proxy:443' }), /only an http:\/\/ proxy/);
});

/** A CONNECT proxy on loopback that lets through only `allow` ports, to this host whatever the name, and lists what it let through. */
async function proxy(t: { after: (fn: () => void) => void }, allow: number[]) {
  const seen: string[] = [];
  const server = createHttpServer();
  server.on('connect', (req, client: Socket, head: Buffer) => {
    const port = Number((req.url ?? '').split(':').pop());
    if (!allow.includes(port)) return void client.end('HTTP/1.1 403 Forbidden\r\n\r\n');
    seen.push(req.url ?? '');
    const upstream = connect(port, '127.0.0.1', () => {
      client.write('HTTP/1.1 200 Connection established\r\n\r\n');
      upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    upstream.on('error', () => client.destroy());
    client.on('error', () => upstream.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url: new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}`), seen };
}

test('a raw connection and an https request go through a CONNECT; a proxy that refuses is one clear error', async (t) => {
  const echo = createServer((s) => s.pipe(s));
  await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
  t.after(() => echo.close());
  const echoPort = (echo.address() as AddressInfo).port;
  const pki = await makePki();
  const tls = createTlsServer({ cert: pki.serverCert, key: pki.serverKey }, (s) =>
    s.end('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok'),
  );
  await new Promise<void>((r) => tls.listen(0, '127.0.0.1', r));
  t.after(() => tls.close());
  const tlsPort = (tls.address() as AddressInfo).port;
  const p = await proxy(t, [echoPort, tlsPort]);

  const s = await connectThrough(p.url, '127.0.0.1', echoPort);
  s.resume();
  const echoed = await new Promise<string>((resolve) => {
    s.once('data', (d: Buffer) => resolve(d.toString()));
    s.write('through the proxy');
  });
  s.destroy();
  assert.equal(echoed, 'through the proxy');

  // An https request to an address this host cannot reach but through the proxy (which takes it
  // to the test's server), with TLS inside the tunnel.
  process.env.HTTPS_PROXY = p.url.href;
  t.after(() => delete process.env.HTTPS_PROXY);
  const opts = { ca: pki.ca, servername: 'localhost' };
  const body = await new Promise<string>((resolve, reject) => {
    const req = request(
      { host: '192.0.2.77', port: tlsPort, path: '/', ...opts, ...proxiedHttps('192.0.2.77', opts) },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => resolve(text));
      },
    );
    req.on('error', reject);
    req.end();
  });
  assert.equal(body, 'ok');
  assert.deepEqual(p.seen, [`127.0.0.1:${echoPort}`, `192.0.2.77:${tlsPort}`]);

  await assert.rejects(
    connectThrough(p.url, '127.0.0.1', 1),
    /proxy 127\.0\.0\.1:\d+ CONNECT 127\.0\.0\.1:1: answered HTTP\/1\.1 403 Forbidden/,
  );
});

test('a proxy setting that cannot be used is one line saying how to set it', () => {
  assert.equal(proxySettingProblem({}), undefined);
  assert.equal(proxySettingProblem({ HTTPS_PROXY: 'http://proxy:3128' }), undefined);
  assert.equal(
    proxySettingProblem({ HTTPS_PROXY: 'https://proxy:443' }),
    "HTTPS_PROXY https://proxy:443: only an http:// proxy is supported (kctl's TLS runs inside the CONNECT); set HTTPS_PROXY as http://HOST:PORT",
  );
  assert.equal(
    proxySettingProblem({ https_proxy: 'http://[bad' }),
    'HTTPS_PROXY http://[bad is not a URL; set it as http://HOST:PORT',
  );
});
