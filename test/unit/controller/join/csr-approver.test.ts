import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  CsrApproverComponent,
  judgeBootstrapCsr,
  judgeServingCsr,
  type Csr,
} from '../../../../src/controller/join/csr-approver.ts';
import { tokenRefusal, type WorkerTokenRecord } from '../../../../src/controller/join/worker-tokens.ts';
import { NodeWatchComponent } from '../../../../src/controller/nodes/nodes.ts';
import { judgeClaims } from '../../../../src/konnectivity/server/claims.ts';
import type { NodeRecord } from '../../../../src/base/ownership.ts';
import { parseCsr } from '../../../../src/controller/join/csr-request.ts';
import { KubeClient } from '../../../../src/kube/client.ts';
import { captureLogger, initialised, tempDir } from '../../../helpers.ts';
import { fakeApiServer, json, watchStream } from '../../kube/fake-apiserver.ts';
import { FakeNodes } from '../../konnectivity/fixtures.ts';

async function csrPem(t: Parameters<typeof tempDir>[0], subject: string, san: string): Promise<string> {
  const dir = await tempDir(t);
  const key = join(dir, 'k.pem');
  execFileSync('openssl', ['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', key]);
  return execFileSync('openssl', ['req', '-new', '-key', key, '-subj', subject, '-addext', `subjectAltName=${san}`], {
    encoding: 'utf8',
  });
}

const node: NodeRecord = {
  name: 'edge-1',
  addresses: [
    { type: 'InternalIP', address: '10.77.0.11' },
    { type: 'Hostname', address: 'edge-1' },
  ],
};
const nodeDir = new FakeNodes([node]);
const noNodes = new FakeNodes([]);
const csr = (pem: string, over: Partial<Csr['spec']> = {}): Csr => ({
  metadata: { name: 'csr-x' },
  spec: {
    request: Buffer.from(pem).toString('base64'),
    signerName: 'kubernetes.io/kubelet-serving',
    username: 'system:node:edge-1',
    groups: ['system:nodes', 'system:authenticated'],
    usages: ['digital signature', 'server auth'],
    ...over,
  },
});

test('reads CN, O and SANs from an ECDSA request (as kubelet sends)', async (t) => {
  const c = parseCsr(await csrPem(t, '/O=system:nodes/CN=system:node:edge-1', 'DNS:edge-1,IP:10.77.0.11,IP:fd00::1'));
  assert.equal(c.commonName, 'system:node:edge-1');
  assert.deepEqual(c.organizations, ['system:nodes']);
  assert.deepEqual(c.dnsNames, ['edge-1']);
  assert.deepEqual(c.ipAddresses, ['10.77.0.11', 'fd00::1']);
});

test("approves a node's request for its own name and address", async (t) => {
  const v = judgeServingCsr(
    csr(await csrPem(t, '/O=system:nodes/CN=system:node:edge-1', 'DNS:edge-1,IP:10.77.0.11')),
    nodeDir,
  );
  assert.equal(v?.approve, true);
});

test("denies an address the node does not own, another node's name, client usages, or a non-node requester", async (t) => {
  const foreignIp = judgeServingCsr(
    csr(await csrPem(t, '/O=system:nodes/CN=system:node:edge-1', 'DNS:edge-1,IP:10.77.0.99')),
    nodeDir,
  );
  assert.deepEqual(foreignIp, {
    approve: false,
    reason: 'names not owned by node edge-1: 10.77.0.99 (node edge-1 does not report it)',
  });
  const otherCn = judgeServingCsr(csr(await csrPem(t, '/O=system:nodes/CN=system:node:edge-2', 'DNS:edge-1')), nodeDir);
  assert.equal(otherCn?.approve, false);
  const pem = await csrPem(t, '/O=system:nodes/CN=system:node:edge-1', 'DNS:edge-1');
  assert.equal(judgeServingCsr(csr(pem, { usages: ['digital signature', 'client auth'] }), nodeDir)?.approve, false);
  assert.equal(
    judgeServingCsr(
      csr(pem, { username: 'system:serviceaccount:default:x', groups: ['system:serviceaccounts'] }),
      nodeDir,
    )?.approve,
    false,
  );
  const wildcard = judgeServingCsr(
    csr(await csrPem(t, '/O=system:nodes/CN=system:node:edge-1', 'DNS:edge-1,URI:spiffe://x')),
    nodeDir,
  );
  assert.equal(wildcard?.approve, false);
});

test('waits (no verdict) until the Node exists, and ignores other signers', async (t) => {
  const pem = await csrPem(t, '/O=system:nodes/CN=system:node:edge-1', 'DNS:edge-1');
  assert.equal(judgeServingCsr(csr(pem), noNodes), null);
  assert.equal(judgeServingCsr(csr(pem, { signerName: 'kubernetes.io/kube-apiserver-client-kubelet' }), nodeDir), null);
});

test(
  'watches CSRs and Nodes: a waiting CSR is approved when its Node registers, a foreign address denied at once',
  { timeout: 20_000 },
  async (t) => {
    const own = csr(await csrPem(t, '/O=system:nodes/CN=system:node:edge-1', 'DNS:edge-1,IP:10.77.0.11'));
    const foreign = {
      ...csr(await csrPem(t, '/O=system:nodes/CN=system:node:edge-2', 'DNS:edge-2,IP:10.77.0.99'), {
        username: 'system:node:edge-2',
      }),
      metadata: { name: 'csr-y' },
    };
    const edge2 = {
      metadata: { name: 'edge-2', resourceVersion: '3' },
      status: { addresses: [{ type: 'InternalIP', address: '10.77.0.12' }] },
    };
    const edge1 = { metadata: { name: 'edge-1', resourceVersion: '7' }, status: { addresses: node.addresses } };
    let nodeWatch: ReturnType<typeof watchStream> | undefined;
    const approvals: { name: string; conditions: { type: string; reason: string }[] }[] = [];
    const api = await fakeApiServer(t, (req, res) => {
      const watching = req.query.get('watch') === 'true';
      if (req.path === '/apis/certificates.k8s.io/v1/certificatesigningrequests') {
        return watching
          ? void watchStream(res)
          : json(res, 200, { metadata: { resourceVersion: '5' }, items: [own, foreign] });
      }
      if (req.path === '/api/v1/nodes') {
        if (!watching) return json(res, 200, { metadata: { resourceVersion: '3' }, items: [edge2] });
        nodeWatch = watchStream(res);
        return;
      }
      const m = /^\/apis\/certificates.k8s.io\/v1\/certificatesigningrequests\/([^/]+)\/approval$/.exec(req.path);
      if (req.method === 'PUT' && m) {
        const body = JSON.parse(req.body) as { status: { conditions: { type: string; reason: string }[] } };
        approvals.push({ name: m[1]!, conditions: body.status.conditions });
        return json(res, 200, body);
      }
      json(res, 404, { kind: 'Status', code: 404, reason: 'NotFound', message: `${req.method} ${req.path}` });
    });
    const kube = new KubeClient({ server: api.url });
    const nodes = new NodeWatchComponent(kube);
    const approver = await initialised(new CsrApproverComponent(kube, nodes), captureLogger().log);
    await nodes.start();
    await approver.start();
    t.after(async () => {
      await approver.stop();
      await nodes.stop();
    });
    const until = async (ok: () => boolean) => {
      while (!ok()) await new Promise((r) => setTimeout(r, 5));
    };
    await until(() => nodeWatch !== undefined && approver.decidedCount === 1);
    assert.deepEqual(
      approvals.map((a) => [a.name, a.conditions[0]!.type]),
      [['csr-y', 'Denied']],
      'edge-1 is not registered yet: no verdict',
    );
    nodeWatch!.event('ADDED', edge1);
    await until(() => approver.decidedCount === 2);
    assert.deepEqual(
      approvals.map((a) => [a.name, a.conditions[0]!.type, a.conditions[0]!.reason]),
      [
        ['csr-y', 'Denied', 'KctlServingCertDenied'],
        ['csr-x', 'Approved', 'KctlServingCertApproved'],
      ],
    );
    assert.equal(
      api.requests.filter((r) => r.method === 'GET' && !r.query.get('watch')).length,
      2,
      'one list per resource, no polling',
    );
  },
);

test('a serving CSR is approved exactly when a konnectivity agent of that node may claim the same names and addresses', async (t) => {
  const directory = nodeDir;
  const cases: { dns: string[]; ips: string[] }[] = [
    { dns: ['edge-1'], ips: ['10.77.0.11'] },
    { dns: ['EDGE-1'], ips: [] },
    { dns: ['edge-1'], ips: ['10.77.0.99'] },
    { dns: ['edge-2'], ips: ['10.77.0.11'] },
    { dns: ['edge-1'], ips: ['fd00::11'] },
  ];
  for (const c of cases) {
    const san = [...c.dns.map((d) => `DNS:${d}`), ...c.ips.map((ip) => `IP:${ip}`)].join(',');
    const csrVerdict = judgeServingCsr(csr(await csrPem(t, '/O=system:nodes/CN=system:node:edge-1', san)), directory);
    const v4 = c.ips.filter((ip) => !ip.includes(':'));
    const v6 = c.ips.filter((ip) => ip.includes(':'));
    const claims = judgeClaims(
      { method: 'certificate', user: 'system:node:edge-1', node: 'edge-1' },
      { host: c.dns.map((d) => d.toLowerCase()), ipv4: v4, ipv6: v6, cidr: [], defaultRoute: false },
      directory,
      false,
    );
    assert.equal(
      csrVerdict?.approve,
      claims.dropped.length === 0,
      `${san}: CSR ${csrVerdict?.reason}; claims dropped ${JSON.stringify(claims.dropped)}`,
    );
  }
});

test("two sites, one address: each node gets a serving certificate for its name and the shared IP (routed to nobody), never for the other's name", async (t) => {
  const site = (name: string, keeps?: string[]): NodeRecord => ({
    name,
    addresses: [
      { type: 'InternalIP', address: '192.168.50.10' },
      { type: 'Hostname', address: name },
    ],
    keeps,
  });
  const dir = new FakeNodes([site('site-a'), site('site-b')]);
  const ask = async (requester: string, san: string) =>
    judgeServingCsr(
      csr(await csrPem(t, `/O=system:nodes/CN=system:node:${requester}`, san), {
        username: `system:node:${requester}`,
      }),
      dir,
    );
  for (const n of ['site-a', 'site-b']) assert.equal((await ask(n, `DNS:${n},IP:192.168.50.10`))?.approve, true, n);
  const other = await ask('site-a', 'DNS:site-a,DNS:site-b,IP:192.168.50.10');
  assert.deepEqual(other, {
    approve: false,
    reason: 'names not owned by node site-a: site-b (reported by node site-b)',
  });
  // Once an admin names site-b the keeper, site-a may no longer name the address.
  const kept = new FakeNodes([site('site-a'), site('site-b', ['192.168.50.10'])]);
  const a = judgeServingCsr(
    csr(await csrPem(t, '/O=system:nodes/CN=system:node:site-a', 'DNS:site-a,IP:192.168.50.10'), {
      username: 'system:node:site-a',
    }),
    kept,
  );
  assert.match(a?.reason ?? '', /192\.168\.50\.10 \(kept by node site-b/);
});

// ---- bootstrap CSRs: what a worker token may mint ----

async function clientCsrPem(t: Parameters<typeof tempDir>[0], subject: string): Promise<string> {
  const dir = await tempDir(t);
  const key = join(dir, 'k.pem');
  execFileSync('openssl', ['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', key]);
  return execFileSync('openssl', ['req', '-new', '-key', key, '-subj', subject], { encoding: 'utf8' });
}

const joinCsr = (pem: string, tokenId = 'abcdef'): Csr => ({
  metadata: { name: `node-csr-${tokenId}` },
  spec: {
    request: Buffer.from(pem).toString('base64'),
    signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
    username: `system:bootstrap:${tokenId}`,
    groups: ['system:bootstrappers', 'system:bootstrappers:kctl:worker', 'system:authenticated'],
    usages: ['digital signature', 'client auth'],
  },
});
const token = (over: Partial<WorkerTokenRecord> = {}): WorkerTokenRecord => ({ id: 'abcdef', joined: [], ...over });
const joinVerdict = async (
  t: Parameters<typeof tempDir>[0],
  name: string,
  tok: WorkerTokenRecord | undefined,
  issued: string[] = [],
) =>
  judgeBootstrapCsr(joinCsr(await clientCsrPem(t, `/O=system:nodes/CN=system:node:${name}`)), {
    nodes: nodeDir,
    token: tok,
    issuedTo: () => issued,
  });

test('a worker token mints a name nobody has; a registered name is denied with the way to re-join', async (t) => {
  assert.deepEqual(await joinVerdict(t, 'edge-9', token()), {
    approve: true,
    reason: 'node edge-9 joins with token abcdef',
  });
  assert.deepEqual(await joinVerdict(t, 'edge-1', token()), {
    approve: false,
    reason:
      'node edge-1 is already registered; a worker token cannot take a registered name (to re-join that host: kctl token create --role worker --node-name edge-1)',
  });
});

test('a token made for one node name joins only that name, registered or not', async (t) => {
  const bound = token({ nodeName: 'edge-1' });
  assert.deepEqual(await joinVerdict(t, 'edge-1', bound), {
    approve: true,
    reason: 'node edge-1 joins with token abcdef (made for this node)',
  });
  assert.deepEqual(await joinVerdict(t, 'edge-9', bound), {
    approve: false,
    reason: 'token abcdef was made for node edge-1 only',
  });
});

test('--uses: a token is used up after N joins; the same join again (kubelet restarted) does not count twice', async (t) => {
  const twice = token({ uses: 2, joined: ['a1'] });
  assert.equal((await joinVerdict(t, 'a2', twice))?.approve, true);
  const full = token({ uses: 2, joined: ['a1', 'a2'] });
  assert.deepEqual(await joinVerdict(t, 'a3', full), { approve: false, reason: 'token abcdef is used up (2 joins)' });
  assert.equal((await joinVerdict(t, 'a2', full))?.approve, true, 'a2 asking again');
  assert.deepEqual(tokenRefusal(token({ uses: 1, joined: ['x'] }), 'y'), 'token abcdef is used up (1 join)');
});

test('a gone token, a name another token already got, a bad subject, SANs or a renewal are not a join it may make', async (t) => {
  assert.deepEqual(await joinVerdict(t, 'edge-9', undefined), {
    approve: false,
    reason: 'token abcdef no longer exists (invalidated, expired or used up)',
  });
  assert.deepEqual(await joinVerdict(t, 'edge-9', token(), ['zzzzzz']), {
    approve: false,
    reason: 'a client certificate for node edge-9 was already issued to a join with token zzzzzz',
  });
  assert.equal((await joinVerdict(t, 'edge-9', token(), ['abcdef']))?.approve, true, 'its own earlier CSR');
  const ctx = { nodes: nodeDir, token: token(), issuedTo: () => [] };
  const masters = judgeBootstrapCsr(joinCsr(await clientCsrPem(t, '/O=system:masters/CN=system:node:edge-9')), ctx);
  assert.deepEqual(masters, { approve: false, reason: 'subject O must be exactly system:nodes' });
  const admin = judgeBootstrapCsr(joinCsr(await clientCsrPem(t, '/O=system:nodes/CN=kubernetes-admin')), ctx);
  assert.equal(admin?.approve, false);
  const bad = judgeBootstrapCsr(joinCsr(await clientCsrPem(t, '/O=system:nodes/CN=system:node:Bad_Name')), ctx);
  assert.match(bad?.reason ?? '', /is not system:node:<a valid node name>/);
  const withSan = judgeBootstrapCsr(
    joinCsr(await csrPem(t, '/O=system:nodes/CN=system:node:edge-9', 'IP:192.0.2.2')),
    ctx,
  );
  assert.deepEqual(withSan, {
    approve: false,
    reason: 'a node client certificate carries no subject alternative names',
  });
  const serverUsage = { ...joinCsr(await clientCsrPem(t, '/O=system:nodes/CN=system:node:edge-9')) };
  serverUsage.spec = { ...serverUsage.spec, usages: ['digital signature', 'server auth'] };
  assert.equal(judgeBootstrapCsr(serverUsage, ctx)?.approve, false);
  const renewal = joinCsr(await clientCsrPem(t, '/O=system:nodes/CN=system:node:edge-1'));
  renewal.spec = { ...renewal.spec, username: 'system:node:edge-1', groups: ['system:nodes'] };
  assert.equal(judgeBootstrapCsr(renewal, ctx), null, "a node's renewal is kube-controller-manager's");
});

test(
  'the approver writes each join on its token before approving, and deletes a token whose last use is taken',
  { timeout: 20_000 },
  async (t) => {
    const pem = await clientCsrPem(t, '/O=system:nodes/CN=system:node:edge-7');
    const secret = {
      metadata: {
        name: 'bootstrap-token-abcdef',
        resourceVersion: '11',
        annotations: { 'kctl.dev/uses': '1' } as Record<string, string>,
      },
    };
    const calls: string[] = [];
    const api = await fakeApiServer(t, (req, res) => {
      const watching = req.query.get('watch') === 'true';
      if (req.path === '/apis/certificates.k8s.io/v1/certificatesigningrequests')
        return watching
          ? void watchStream(res)
          : json(res, 200, { metadata: { resourceVersion: '5' }, items: [joinCsr(pem)] });
      if (req.path === '/api/v1/nodes')
        return watching ? void watchStream(res) : json(res, 200, { metadata: { resourceVersion: '3' }, items: [] });
      if (req.path === '/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef') {
        calls.push(req.method);
        if (req.method === 'PATCH') {
          const patch = JSON.parse(req.body) as {
            metadata: { resourceVersion: string; annotations: Record<string, string> };
          };
          assert.equal(
            patch.metadata.resourceVersion,
            '11',
            'the join is written only on the version it was judged on',
          );
          Object.assign(secret.metadata.annotations, patch.metadata.annotations);
        }
        return json(res, 200, secret);
      }
      if (req.method === 'PUT' && req.path.endsWith('/approval')) {
        calls.push(
          `approve ${(JSON.parse(req.body) as { status: { conditions: { type: string }[] } }).status.conditions[0]!.type}`,
        );
        return json(res, 200, JSON.parse(req.body));
      }
      json(res, 404, { kind: 'Status', code: 404, reason: 'NotFound', message: `${req.method} ${req.path}` });
    });
    const kube = new KubeClient({ server: api.url });
    const nodes = new NodeWatchComponent(kube);
    const log = captureLogger();
    const approver = await initialised(new CsrApproverComponent(kube, nodes), log.log);
    await nodes.start();
    await approver.start();
    t.after(async () => {
      await approver.stop();
      await nodes.stop();
    });
    // The line is logged once the DELETE is answered (the fake server sees the request before that).
    const deleted = () => log.lines().some((l) => l.msg === 'token abcdef is used up and was deleted');
    while (!deleted()) await new Promise((r) => setTimeout(r, 5));
    assert.deepEqual(calls, ['GET', 'PATCH', 'approve Approved', 'GET', 'DELETE']);
    assert.equal(secret.metadata.annotations['kctl.dev/joined-nodes'], 'edge-7');
  },
);
