// The node's nftables table for its pods' policies: what it says, and that nft accepts it.
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { execa } from 'execa';
import { cidrSet, NETPOL_TABLE, renderNodePolicy } from '../../../src/worker/network-policy.ts';
import type { NodePolicy } from '../../../src/kube/network-policy.ts';

/** nft's own check of a whole table (-c: parsed and validated by the kernel, nothing applied); it needs root. */
async function nftAccepts(t: TestContext, body: string): Promise<void> {
  await t.test(
    'nft accepts the table',
    { skip: process.getuid?.() !== 0 && 'needs root: nft -c asks the kernel' },
    async () => {
      const r = await execa('nft', ['-c', '-f', '-'], {
        input: `table inet ${NETPOL_TABLE} {\n${body}}\n`,
        reject: false,
      });
      assert.equal(r.exitCode, 0, `nft refused the table: ${r.stderr}\n${body}`);
    },
  );
}

test('CIDR sets: network addresses, nested ones dropped (nft refuses overlaps), IPv6 and garbage left out', () => {
  assert.deepEqual(
    cidrSet([
      '10.0.1.7/24',
      '10.0.1.9',
      '10.0.0.0/16',
      '192.168.1.1/32',
      '2001:db8::/32',
      '10.0.0.1; drop',
      '300.1.1.1',
    ]),
    ['10.0.0.0/16', '192.168.1.1/32'],
  );
});

test('an isolated pod with nothing allowed gets a chain that only drops; others are not named', async (t) => {
  const body = renderNodePolicy({ pods: [{ pod: 'shop/web', ip: '10.244.1.2', ingress: [] }] });
  assert.match(body, /ct state established,related accept/);
  assert.match(body, /ip daddr vmap \{ 10\.244\.1\.2 : jump ingress-0 \}/);
  assert.doesNotMatch(body, /saddr vmap/);
  assert.match(body, /chain ingress-0 \{\n {4}drop\n {2}\}/);
  await nftAccepts(t, body);
});

test('allows become one rule per peer group and protocol; egress returns, ingress accepts; nft accepts the table', async (t) => {
  const policy: NodePolicy = {
    pods: [
      {
        pod: 'shop/web',
        ip: '10.244.1.2',
        ingress: [
          {
            peers: [
              { cidr: '10.244.2.2/32' },
              { cidr: '10.244.2.0/24' },
              { cidr: '192.168.0.0/16', except: ['192.168.9.0/24'] },
            ],
            ports: [{ protocol: 'TCP', port: 8080 }],
          },
          {
            ports: [
              { protocol: 'UDP', port: 53 },
              { protocol: 'TCP', port: 8000, endPort: 8100 },
              { protocol: 'SCTP' },
            ],
          },
        ],
        egress: [{ peers: [{ cidr: '10.244.3.2/32' }] }],
      },
      { pod: 'shop/client', ip: '10.244.1.3', egress: [{}] },
    ],
  };
  const body = renderNodePolicy(policy);
  const rules = body.split('\n').map((l) => l.trim());
  assert.ok(rules.includes('ip saddr 10.244.2.0/24 meta l4proto tcp th dport 8080 accept'), body);
  assert.ok(
    rules.includes('ip saddr 192.168.0.0/16 ip saddr != 192.168.9.0/24 meta l4proto tcp th dport 8080 accept'),
    body,
  );
  assert.ok(rules.includes('meta l4proto tcp th dport 8000-8100 accept'), body);
  assert.ok(rules.includes('meta l4proto udp th dport 53 accept'), body);
  assert.ok(rules.includes('meta l4proto sctp accept'), body);
  assert.ok(rules.includes('ip daddr 10.244.3.2/32 return'), body);
  // An allow of anything: the chain returns before its drop.
  assert.match(body, /chain egress-1 \{\n {4}return\n {4}drop\n/);
  assert.match(body, /ip saddr vmap \{ 10\.244\.1\.2 : jump egress-0, 10\.244\.1\.3 : jump egress-1 \}/);
  await nftAccepts(t, body);
});

test('a pod whose address is not one IPv4 address is left out rather than breaking the table', async (t) => {
  const body = renderNodePolicy({ pods: [{ pod: 'a/b', ip: '10.244.1.0/24', ingress: [] }] });
  assert.doesNotMatch(body, /vmap/);
  await nftAccepts(t, body);
});
