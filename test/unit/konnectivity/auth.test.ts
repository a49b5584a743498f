// Who may connect as an agent: node certificates of the cluster CA, or service-account tokens
// that TokenReview accepts. Everything else is refused at Connect with a reason.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { tempDir } from '../../helpers.ts';
import { makePki, rawAgent, startAgent, startServer } from './fixtures.ts';
import { waitFor } from '../../wait.ts';

test('a node certificate is accepted; headers carry serverid, the live servercount and the extension answer', async (t) => {
  const pki = await makePki();
  let controllers = 1;
  const server = await startServer(t, pki, { serverId: 'ctrl-a', serverCount: () => controllers });
  const a = await rawAgent(t, pki, server, {
    agentId: 'node-7',
    creds: await pki.nodeCert('node-7'),
    identifiers: 'host=node-7&host=node-8&ipv4=10.0.0.7',
  });
  assert.deepEqual(a.headers.get('serverid'), ['ctrl-a']);
  assert.deepEqual(a.headers.get('servercount'), ['1']);
  assert.deepEqual(
    a.headers.get('kctl-extensions'),
    [],
    'not offered, not answered (upstream agents see no extension)',
  );
  const snap = await waitFor('agent listed', 10_000, () => server.snapshot().agents[0]);
  assert.equal(snap.node, 'node-7');
  assert.equal(snap.auth, 'certificate');
  assert.deepEqual(snap.accepted.ipv4, ['10.0.0.7'], 'a server without a Node directory takes addresses as claimed');
  assert.deepEqual(snap.accepted.host, ['node-7'], "a node certificate does not vouch for another node's name");
  assert.deepEqual(snap.claimed.host, ['node-7', 'node-8']);
  assert.deepEqual(snap.dropped, [{ claim: 'host=node-8', reason: "not node node-7's name" }]);

  controllers = 3; // a controller joined: the next Connect learns it
  const b = await rawAgent(t, pki, server, {
    agentId: 'node-8',
    creds: await pki.nodeCert('node-8'),
    extensions: true,
  });
  assert.deepEqual(b.headers.get('servercount'), ['3']);
  assert.deepEqual(b.headers.get('kctl-extensions'), ['flow-control/1']);
});

test('no certificate and no token: refused, saying what an agent needs', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki);
  await assert.rejects(
    rawAgent(t, pki, server, { creds: null }),
    /no client certificate signed by the cluster CA and no bearer token.*O=system:nodes/,
  );
  assert.equal(server.snapshot().agents.length, 0);
});

test('a cluster-CA certificate that is not a node certificate: refused', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki);
  const admin = await pki.clientCert({ commonName: 'system:node:evil', organizations: ['system:masters'] });
  await assert.rejects(
    rawAgent(t, pki, server, { creds: admin }),
    /CN=system:node:evil,O=system:masters is not a node certificate/,
  );
  const notNode = await pki.clientCert({ commonName: 'kubelet', organizations: ['system:nodes'] });
  await assert.rejects(
    rawAgent(t, pki, server, { creds: notNode }),
    /CN=kubelet,O=system:nodes is not a node certificate/,
  );
  assert.equal(server.snapshot().agents.length, 0);
});

test('a node certificate from another CA: refused', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki);
  const other = await pki.foreignCa();
  const forged = await pki.clientCert({
    commonName: 'system:node:node-1',
    organizations: ['system:nodes'],
    signer: other,
  });
  await assert.rejects(rawAgent(t, pki, server, { creds: forged }), /no client certificate signed by the cluster CA/);
  assert.equal(server.snapshot().agents.length, 0);
});

test('service-account tokens go through the TokenReview callback', async (t) => {
  const pki = await makePki();
  const seen: string[] = [];
  const server = await startServer(t, pki, {
    tokenReview: async (token) => {
      seen.push(token);
      return token === 'good'
        ? { ok: true, user: 'system:serviceaccount:kube-system:konnectivity-agent' }
        : { ok: false, error: 'token expired' };
    },
  });
  await assert.rejects(
    rawAgent(t, pki, server, { creds: null, token: 'bad' }),
    /service-account token rejected: token expired/,
  );
  const a = await rawAgent(t, pki, server, { creds: null, token: 'good', agentId: 'pod-agent' });
  assert.equal(a.headers.get('serverid').length, 1);
  const snap = await waitFor('agent listed', 10_000, () => server.snapshot().agents[0]);
  assert.equal(snap.auth, 'token');
  assert.equal(snap.user, 'system:serviceaccount:kube-system:konnectivity-agent');
  assert.deepEqual(seen, ['bad', 'good']);
});

test('a token is refused when the server has no TokenReview; agentid is required', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki);
  await assert.rejects(rawAgent(t, pki, server, { creds: null, token: 'x' }), /token authentication is not enabled/);
  await assert.rejects(rawAgent(t, pki, server, { agentId: '' }), /agentid must be set exactly once/);
});

test('a kctl agent with a service-account token file (no client certificate) connects', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, {
    tokenReview: async (token) => ({
      ok: token === 'sa-token',
      user: 'system:serviceaccount:kube-system:konnectivity-agent',
    }),
  });
  const dir = await tempDir(t);
  const tokenPath = join(dir, 'token');
  await writeFile(tokenPath, 'sa-token\n');
  const agent = await startAgent(t, pki, [server], {
    agentId: 'pod-agent',
    cert: undefined,
    key: undefined,
    serviceAccountTokenPath: tokenPath,
  });
  await agent.ready(AbortSignal.timeout(10_000));
  assert.equal((await waitFor('agent listed', 10_000, () => server.snapshot().agents[0])).auth, 'token');
});

test('a kctl agent with a foreign certificate never connects and says why', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki);
  const forged = await pki.clientCert({
    commonName: 'system:node:n',
    organizations: ['system:nodes'],
    signer: await pki.foreignCa(),
  });
  const agent = await startAgent(t, pki, [server], { ...forged });
  await assert.rejects(
    agent.ready(AbortSignal.timeout(1_500)),
    /reached no server .*no client certificate signed by the cluster CA/,
  );
});

test("a CA rotation reaches the agent port: the new CA's node certificates are accepted once trusted, and the dropped CA's streams are cut at once", async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki);
  const next = await pki.foreignCa();
  const fromNext = await pki.clientCert({
    commonName: 'system:node:node-n',
    organizations: ['system:nodes'],
    signer: next,
  });
  const old = await rawAgent(t, pki, server, { agentId: 'node-o', creds: await pki.nodeCert('node-o') });
  await assert.rejects(
    rawAgent(t, pki, server, { agentId: 'node-n', creds: fromNext }),
    /no client certificate signed by the cluster CA/,
  );

  // trust: both CAs (the old one still first); nobody is cut off and the new CA's nodes get in.
  server.setTls({ cert: pki.serverCert, key: pki.serverKey, ca: pki.ca + next.certPem });
  const renewed = await rawAgent(t, pki, server, { agentId: 'node-n', creds: fromNext });
  assert.deepEqual(
    server
      .snapshot()
      .agents.map((a) => a.id)
      .sort(),
    ['system:node:node-n', 'system:node:node-o'],
  );

  // drop: only the new CA. The old CA's stream ends now, and it cannot come back.
  server.setTls({ cert: pki.serverCert, key: pki.serverKey, ca: next.certPem });
  await waitFor('the old CA agent cut off', 10_000, () => server.snapshot().agents.length === 1);
  assert.equal(server.snapshot().agents[0]?.id, 'system:node:node-n');
  await Promise.race([
    old.ended,
    new Promise((_, reject) => setTimeout(() => reject(new Error('the stream did not end')), 5_000)),
  ]);
  await assert.rejects(
    rawAgent(t, pki, server, { agentId: 'node-o', creds: await pki.nodeCert('node-o') }),
    /no client certificate signed by the cluster CA/,
  );
  renewed.close();
});
