import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { CsrApproverComponent, judgeServingCsr, type Csr } from '../../../src/controller/csr-approver.ts';
import { NodeWatchComponent } from '../../../src/controller/nodes.ts';
import { judgeClaims, type NodeRecord } from '../../../src/konnectivity/claims.ts';
import { parseCsr } from '../../../src/controller/csr-request.ts';
import { KubeClient } from '../../../src/kube/client.ts';
import { captureLogger, tempDir } from '../../helpers.ts';
import { fakeApiServer, json, watchStream } from '../kube/fake-apiserver.ts';

async function csrPem(t: Parameters<typeof tempDir>[0], subject: string, san: string): Promise<string> {
  const dir = await tempDir(t);
  const key = join(dir, 'k.pem');
  execFileSync('openssl', ['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', key]);
  return execFileSync('openssl', ['req', '-new', '-key', key, '-subj', subject, '-addext', `subjectAltName=${san}`], { encoding: 'utf8' });
}

const node: NodeRecord = {
  name: 'edge-1',
  addresses: [
    { type: 'InternalIP', address: '10.77.0.11' },
    { type: 'Hostname', address: 'edge-1' },
  ],
};
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
  const v = judgeServingCsr(csr(await csrPem(t, '/O=system:nodes/CN=system:node:edge-1', 'DNS:edge-1,IP:10.77.0.11')), node);
  assert.equal(v?.approve, true);
});

test("denies an address the node does not own, another node's name, client usages, or a non-node requester", async (t) => {
  const foreignIp = judgeServingCsr(csr(await csrPem(t, '/O=system:nodes/CN=system:node:edge-1', 'DNS:edge-1,IP:10.77.0.99')), node);
  assert.deepEqual(foreignIp, { approve: false, reason: 'names not owned by node edge-1: 10.77.0.99' });
  const otherCn = judgeServingCsr(csr(await csrPem(t, '/O=system:nodes/CN=system:node:edge-2', 'DNS:edge-1')), node);
  assert.equal(otherCn?.approve, false);
  const pem = await csrPem(t, '/O=system:nodes/CN=system:node:edge-1', 'DNS:edge-1');
  assert.equal(judgeServingCsr(csr(pem, { usages: ['digital signature', 'client auth'] }), node)?.approve, false);
  assert.equal(judgeServingCsr(csr(pem, { username: 'system:serviceaccount:default:x', groups: ['system:serviceaccounts'] }), node)?.approve, false);
  const wildcard = judgeServingCsr(csr(await csrPem(t, '/O=system:nodes/CN=system:node:edge-1', 'DNS:edge-1,URI:spiffe://x')), node);
  assert.equal(wildcard?.approve, false);
});

test('waits (no verdict) until the Node exists, and ignores other signers', async (t) => {
  const pem = await csrPem(t, '/O=system:nodes/CN=system:node:edge-1', 'DNS:edge-1');
  assert.equal(judgeServingCsr(csr(pem), undefined), null);
  assert.equal(judgeServingCsr(csr(pem, { signerName: 'kubernetes.io/kube-apiserver-client-kubelet' }), node), null);
});

test(
  'watches CSRs and Nodes: a waiting CSR is approved when its Node registers, a foreign address denied at once',
  { timeout: 20_000 },
  async (t) => {
    const own = csr(await csrPem(t, '/O=system:nodes/CN=system:node:edge-1', 'DNS:edge-1,IP:10.77.0.11'));
    const foreign = {
      ...csr(await csrPem(t, '/O=system:nodes/CN=system:node:edge-2', 'DNS:edge-2,IP:10.77.0.99'), { username: 'system:node:edge-2' }),
      metadata: { name: 'csr-y' },
    };
    const edge2 = { metadata: { name: 'edge-2', resourceVersion: '3' }, status: { addresses: [{ type: 'InternalIP', address: '10.77.0.12' }] } };
    const edge1 = { metadata: { name: 'edge-1', resourceVersion: '7' }, status: { addresses: node.addresses } };
    let nodeWatch: ReturnType<typeof watchStream> | undefined;
    const approvals: { name: string; conditions: { type: string; reason: string }[] }[] = [];
    const api = await fakeApiServer(t, (req, res) => {
      const watching = req.query.get('watch') === 'true';
      if (req.path === '/apis/certificates.k8s.io/v1/certificatesigningrequests') {
        assert.equal(req.query.get('fieldSelector'), 'spec.signerName=kubernetes.io/kubelet-serving');
        return watching ? void watchStream(res) : json(res, 200, { metadata: { resourceVersion: '5' }, items: [own, foreign] });
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
    const approver = new CsrApproverComponent(kube, nodes, captureLogger().log);
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
    assert.equal(api.requests.filter((r) => r.method === 'GET' && !r.query.get('watch')).length, 2, 'one list per resource, no polling');
  },
);

test('a serving CSR is approved exactly when a konnectivity agent of that node may claim the same names and addresses', async (t) => {
  const directory = { synced: true, get: (n: string) => (n === node.name ? node : undefined), owners: () => [], onChange: () => () => {} };
  const cases: { dns: string[]; ips: string[] }[] = [
    { dns: ['edge-1'], ips: ['10.77.0.11'] },
    { dns: ['EDGE-1'], ips: [] },
    { dns: ['edge-1'], ips: ['10.77.0.99'] },
    { dns: ['edge-2'], ips: ['10.77.0.11'] },
    { dns: ['edge-1'], ips: ['fd00::11'] },
  ];
  for (const c of cases) {
    const san = [...c.dns.map((d) => `DNS:${d}`), ...c.ips.map((ip) => `IP:${ip}`)].join(',');
    const csrVerdict = judgeServingCsr(csr(await csrPem(t, '/O=system:nodes/CN=system:node:edge-1', san)), node);
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
