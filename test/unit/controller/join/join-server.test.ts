// The controller join endpoint with a fake API server behind it (kine storage: no etcd step).
import assert from 'node:assert/strict';
import { SHARED_PKI_FILES } from '../../../../src/pki/paths.ts';
import { writeFile, mkdir } from 'node:fs/promises';
import { request } from 'node:https';
import { connect } from 'node:net';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { parseConfig } from '../../../../src/controller/config/config.ts';
import { ControllerTokenStore } from '../../../../src/controller/join/controller-tokens.ts';
import { JoinServerComponent } from '../../../../src/controller/join/join-server.ts';
import { JOIN_PATH, type JoinRequest } from '../../../../src/controller/join/join-request.ts';
import { pkiPaths } from '../../../../src/pki/index.ts';
import { captureLogger, initialised, selfSignedCert, tempDir } from '../../../helpers.ts';
import { freePort } from '../../../ports.ts';
import { fakeSecrets } from '../fake-secrets.ts';

const SECRET = '0123456789abcdef';

async function joinEndpoint(t: TestContext) {
  const dir = await tempDir(t);
  const pki = pkiPaths(join(dir, 'pki'));
  await mkdir(join(pki.dir, 'etcd'), { recursive: true });
  for (const f of SHARED_PKI_FILES) await writeFile(join(pki.dir, f), `contents of ${f}`);
  // pki.serverCert and pki.serverKey: the endpoint serves with the API serving certificate.
  const server = selfSignedCert(pki.dir, 'server', { cn: 'kube-apiserver', san: 'IP:127.0.0.1' });
  const port = await freePort();
  const cfg = parseConfig(
    {
      spec: {
        api: { address: '127.0.0.1', joinPort: port },
        storage: { type: 'kine', kine: { dataSource: 'postgres://kctl:pw@db:5432/kine' } },
      },
    },
    'kctl.yaml',
  );
  const f = await fakeSecrets(t);
  const { log, lines, raw } = captureLogger();
  const component = await initialised(new JoinServerComponent(cfg, pki, f.kube, undefined), log);
  await component.start();
  t.after(() => component.stop());
  const body: JoinRequest = {
    name: 'c2',
    peerUrl: 'https://127.0.0.1:2380',
    storage: 'kine',
    datastore: 'postgres://db:5432/kine',
    network: {
      podCIDR: cfg.spec.network.podCIDR,
      serviceCIDR: cfg.spec.network.serviceCIDR,
      clusterDomain: cfg.spec.network.clusterDomain,
    },
  };
  /** One join request with `token`: the status and the answer's body. */
  const post = (token: string) =>
    new Promise<{ status: number; body: { error?: string; files?: Record<string, string> } }>((resolve, reject) => {
      const payload = JSON.stringify(body);
      const req = request(
        {
          host: '127.0.0.1',
          port,
          path: JOIN_PATH,
          method: 'POST',
          ca: server.pem,
          headers: { authorization: `Bearer ${token}` },
        },
        (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as { error?: string } }));
        },
      );
      req.on('error', reject);
      req.end(payload);
    });
  return { port, f, post, lines, raw, store: new ControllerTokenStore(f.kube), component };
}

test('the join endpoint listens on spec.api.address only', async (t) => {
  const { port } = await joinEndpoint(t);
  const reach = (host: string) =>
    new Promise<string>((resolve) => {
      const s = connect(port, host, () => {
        s.destroy();
        resolve('connected');
      });
      s.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    });
  assert.equal(await reach('127.0.0.1'), 'connected');
  // Another loopback address of the same host: reachable were the endpoint bound to 0.0.0.0.
  assert.equal(await reach('127.0.0.2'), 'ECONNREFUSED');
});

test('a single-use token hands over the keys once; the second join is refused as used up; the secret is never logged', async (t) => {
  const { post, store, raw } = await joinEndpoint(t);
  await store.create({ id: 'abc123', secret: SECRET, expiryMs: 3_600_000, uses: 1 });
  const first = await post(`abc123.${SECRET}`);
  assert.equal(first.status, 200, first.body.error ?? '');
  assert.equal(Buffer.from(first.body.files!['ca.key']!, 'base64').toString(), 'contents of ca.key');
  const second = await post(`abc123.${SECRET}`);
  assert.equal(second.status, 401);
  assert.match(
    second.body.error!,
    /^the join token is used up \(1 join\); create a new one with: kctl token create --role controller$/,
  );
  assert.ok(!raw().includes(SECRET), 'the token secret reached the log');
  assert.ok(!raw().includes('contents of ca.key'), 'a key reached the log');
});

test('two joins at once with a single-use token: one gets the keys, the other is refused', async (t) => {
  const { post, store } = await joinEndpoint(t);
  await store.create({ id: 'abc123', secret: SECRET, expiryMs: 3_600_000, uses: 1 });
  const results = await Promise.all([post(`abc123.${SECRET}`), post(`abc123.${SECRET}`)]);
  assert.deepEqual(results.map((r) => r.status).sort(), [200, 401]);
});

test('after 10 bad tokens from one address within a minute it is refused (429) even with a good token, with one warn line', async (t) => {
  const { post, store, lines, f } = await joinEndpoint(t);
  await store.create({ id: 'abc123', secret: SECRET, expiryMs: 3_600_000, uses: 1 });
  for (let i = 0; i < 10; i++)
    assert.equal((await post(`abc123.${String(i).padStart(16, 'x')}`)).status, 401, `attempt ${i + 1}`);
  const apiCalls = f.api.requests.length;
  for (let i = 0; i < 3; i++) {
    const r = await post(`abc123.${SECRET}`);
    assert.equal(r.status, 429);
    assert.match(r.body.error!, /^too many failed join attempts from 127\.0\.0\.1; try again in \d+ s$/);
  }
  assert.equal(f.api.requests.length, apiCalls, 'a blocked source still cost API calls');
  const warns = lines().filter((l) => l.level === 40);
  assert.equal(warns.length, 1, JSON.stringify(warns));
  assert.match(
    String(warns[0]!.msg),
    /^10 join attempts with a bad token from 127\.0\.0\.1 within 60 s: refusing that address for 60 s$/,
  );
  // The token itself was not used by any of this.
  assert.equal((await store.check(`abc123.${SECRET}`)).token.used, 0);
});

test('stopping does not wait for a client that keeps a request open (a node gone in the middle of a download)', async (t) => {
  const { port, component } = await joinEndpoint(t);
  const { connect: tlsConnect } = await import('node:tls');
  // Half a request, never finished: the server holds an active connection for it.
  const socket = tlsConnect({ host: '127.0.0.1', port, rejectUnauthorized: false });
  await new Promise<void>((resolve, reject) => socket.once('secureConnect', () => resolve()).once('error', reject));
  socket.write('GET /v1/executables/0.2.0 HTTP/1.1\r\nhost: x\r\n');
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.on('error', () => undefined);
  // Node's own bound on an unfinished request is a minute and more; a stop that waited for it would hang here.
  const HANG_MS = 20_000;
  const outcome = await Promise.race([
    component.stop().then(() => 'stopped'),
    new Promise((r) => setTimeout(r, HANG_MS, 'hung')).then(() => 'hung'),
  ]);
  assert.equal(outcome, 'stopped');
  await closed;
});
