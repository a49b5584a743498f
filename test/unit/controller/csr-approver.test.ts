import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { judgeServingCsr, type Csr, type NodeAddresses } from '../../../src/controller/csr-approver.ts';
import { parseCsr } from '../../../src/controller/csr-request.ts';
import { tempDir } from '../../helpers.ts';

async function csrPem(t: Parameters<typeof tempDir>[0], subject: string, san: string): Promise<string> {
  const dir = await tempDir(t);
  const key = join(dir, 'k.pem');
  execFileSync('openssl', ['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', key]);
  return execFileSync('openssl', ['req', '-new', '-key', key, '-subj', subject, '-addext', `subjectAltName=${san}`], { encoding: 'utf8' });
}

const node: NodeAddresses = { name: 'edge-1', addresses: [{ type: 'InternalIP', address: '10.77.0.11' }, { type: 'Hostname', address: 'edge-1' }] };
const csr = (pem: string, over: Partial<Csr['spec']> = {}): Csr => ({
  metadata: { name: 'csr-x' },
  spec: { request: Buffer.from(pem).toString('base64'), signerName: 'kubernetes.io/kubelet-serving', username: 'system:node:edge-1', groups: ['system:nodes', 'system:authenticated'], usages: ['digital signature', 'server auth'], ...over },
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

test('denies an address the node does not own, another node\'s name, client usages, or a non-node requester', async (t) => {
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
