import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KubeClient } from '../../../src/kube/client.ts';
import { NetworkComponent } from '../../../src/worker/network.ts';
import { workerPaths } from '../../../src/worker/paths.ts';
import { captureLogger, tempDir } from '../../helpers.ts';
import { fakeApiServer, json, node, watchStream } from '../kube/fake-apiserver.ts';

// Only the waiting part of ready(): once a podCIDR arrives the component changes host routes and
// sysctls, which the end-to-end worker test covers inside a lab host.
async function network(t: Parameters<typeof tempDir>[0], server: string): Promise<NetworkComponent> {
  const dir = await tempDir(t);
  const net = new NetworkComponent({
    paths: workerPaths(dir, dir),
    nodeName: 'edge-1',
    kube: new KubeClient({ server }),
    clusterCIDR: '10.244.0.0/16',
    controllers: [],
    watch: { backoffMinMs: 10 },
  });
  await net.init({ log: captureLogger().log, statuses: () => [] });
  await net.start();
  t.after(() => net.stop());
  return net;
}

test('waits on the Node watch for a podCIDR and says why when it gives up', { timeout: 20_000 }, async (t) => {
  const api = await fakeApiServer(t, (req, res) =>
    req.query.get('watch') === 'true'
      ? void watchStream(res).event('MODIFIED', node('edge-1', '6'))
      : json(res, 200, { metadata: { resourceVersion: '5' }, items: [] }),
  );
  const net = await network(t, api.url);
  await assert.rejects(
    net.ready(AbortSignal.timeout(500)),
    /^Error: node edge-1 has no podCIDR: not assigned yet \(is kube-controller-manager running with --allocate-node-cidrs\?\)$/,
  );
  assert.equal(
    api.requests.filter((r) => r.path === '/api/v1/nodes' && !r.query.get('watch')).length,
    1,
    'one list, then the watch: no polling',
  );
});

test('reports the API error while the Nodes cannot be read', { timeout: 20_000 }, async (t) => {
  const api = await fakeApiServer(t, (_req, res) =>
    json(res, 403, {
      kind: 'Status',
      code: 403,
      reason: 'Forbidden',
      message: 'nodes is forbidden: User "system:anonymous" cannot list resource "nodes"',
    }),
  );
  const net = await network(t, api.url);
  await assert.rejects(
    net.ready(AbortSignal.timeout(300)),
    /node edge-1 has no podCIDR: GET \/api\/v1\/nodes: 403 nodes is forbidden/,
  );
});

test("a peer's self-declared pod range is not routed: the honest node keeps the route to its own, in every mode", async () => {
  const [{ desiredRoutes }, { routableNodes }] = await Promise.all([
    import('../../../src/worker/overlay.ts'),
    import('../../../src/worker/peers.ts'),
  ]);
  const kubeNode = (name: string, ip: string, ...podCIDRs: string[]) => ({
    metadata: { name },
    spec: { podCIDR: podCIDRs[0], podCIDRs },
    status: { addresses: [{ type: 'InternalIP', address: ip }] },
  });
  const space = {
    isController: (v: string) => v === '192.0.2.10',
    serviceCIDRs: ['10.96.0.0/12'],
    podCIDRs: ['10.244.0.0/16'],
    podRangeBits: 24,
  };
  for (const lie of ['10.244.1.0/25', '10.244.1.5/32', '0.0.0.0/0']) {
    const { nodes, refused } = routableNodes(
      [
        kubeNode('self', '192.0.2.1', '10.244.0.0/24'),
        kubeNode('w1', '192.0.2.2', '10.244.1.0/24'),
        kubeNode('evil', '192.0.2.3', lie),
      ],
      'self',
      space,
    );
    for (const mode of ['routes', 'vxlan'] as const)
      assert.deepEqual([...desiredRoutes(nodes, 'self', mode).keys()], ['10.244.1.0/24'], `${lie} ${mode}`);
    assert.deepEqual(
      refused.map((r) => [r.node, r.range]),
      [['evil', lie]],
    );
  }
  // Without the published shape (an older controller), the join token's CIDR still keeps 0.0.0.0/0 out.
  const older = { isController: () => false, serviceCIDRs: [], podCIDRs: ['10.244.0.0/16'] };
  const { nodes } = routableNodes([kubeNode('evil', '192.0.2.3', '0.0.0.0/0')], 'self', older);
  assert.equal(nodes[0]?.podCIDR, undefined);
});

test("a peer that reports a controller's or a reserved address is no peer; a WireGuard key two Nodes publish is nobody's", async () => {
  const [{ desiredRoutes }, { routableNodes }] = await Promise.all([
    import('../../../src/worker/overlay.ts'),
    import('../../../src/worker/peers.ts'),
  ]);
  const kubeNode = (name: string, ip: string, podCIDR: string, key: string) => ({
    metadata: { name, annotations: { 'kctl.dev/wireguard-public-key': key } },
    spec: { podCIDR, podCIDRs: [podCIDR] },
    status: { addresses: [{ type: 'InternalIP', address: ip }] },
  });
  const reserved = {
    isController: (v: string) => v === '192.0.2.10',
    serviceCIDRs: ['10.96.0.0/12'],
    podCIDRs: ['10.244.0.0/16'],
    podRangeBits: 24,
  };
  const key = (c: string) => Buffer.alloc(32, c).toString('base64');
  const { nodes, refusedPeers } = routableNodes(
    [
      kubeNode('self', '192.0.2.1', '10.244.0.0/24', key('s')),
      kubeNode('w1', '192.0.2.2', '10.244.1.0/24', key('a')),
      kubeNode('liar', '192.0.2.10', '10.244.2.0/24', key('b')),
      kubeNode('svc', '10.96.0.1', '10.244.3.0/24', key('c')),
      kubeNode('copy', '192.0.2.5', '10.244.4.0/24', key('a')),
    ],
    'self',
    reserved,
  );
  for (const mode of ['routes', 'vxlan', 'wireguard'] as const)
    assert.deepEqual(
      [...desiredRoutes(nodes, 'self', mode).keys()],
      mode === 'wireguard' ? [] : ['10.244.1.0/24', '10.244.4.0/24'],
      mode,
    );
  assert.deepEqual(
    nodes.filter((n) => n.name === 'liar' || n.name === 'svc').map((n) => [n.internalIP, n.podCIDR]),
    [
      [undefined, undefined],
      [undefined, undefined],
    ],
  );
  assert.deepEqual(
    refusedPeers.map((r) => `${r.node}: ${r.what}: ${r.reason}`),
    [
      'w1: wireguard key: also published by node copy',
      "liar: address 192.0.2.10: a controller's address",
      'svc: address 10.96.0.1: inside the service CIDR 10.96.0.0/12',
      'copy: wireguard key: also published by node w1',
    ],
  );
});

test("two sites, one address: neither node is routed the other's address (routes and VXLAN leave it out, saying why); WireGuard carries its pods, endpoint from handshakes; an admin's keeper gets it back", async () => {
  const [{ desiredRoutes }, { routableNodes }] = await Promise.all([
    import('../../../src/worker/overlay.ts'),
    import('../../../src/worker/peers.ts'),
  ]);
  const kubeNode = (name: string, podCIDR: string, keeps?: string) => ({
    metadata: {
      name,
      annotations: {
        'kctl.dev/wireguard-public-key': Buffer.alloc(32, name).toString('base64'),
        'kctl.dev/wireguard-endpoint': '192.168.50.10:51820',
        ...(keeps ? { 'kctl.dev/keeps-addresses': keeps } : {}),
      },
    },
    spec: { podCIDR, podCIDRs: [podCIDR] },
    status: { addresses: [{ type: 'InternalIP', address: '192.168.50.10' }] },
  });
  const reserved = {
    isController: () => false,
    serviceCIDRs: ['10.96.0.0/12'],
    podCIDRs: ['10.244.0.0/16'],
    podRangeBits: 24,
  };
  const { nodes, refusedPeers } = routableNodes(
    [kubeNode('site-a', '10.244.1.0/24'), kubeNode('site-b', '10.244.2.0/24')],
    'site-a',
    reserved,
  );
  assert.deepEqual([...desiredRoutes(nodes, 'site-a', 'routes').keys()], []);
  assert.deepEqual([...desiredRoutes(nodes, 'site-a', 'vxlan').keys()], []);
  assert.deepEqual([...desiredRoutes(nodes, 'site-a', 'wireguard')], [['10.244.2.0/24', { dev: 'kctl-wg' }]]);
  const b = nodes.find((n) => n.name === 'site-b');
  assert.equal(b?.internalIP, undefined);
  assert.equal(
    b?.wireguardEndpoint,
    undefined,
    "its published endpoint is this node's own address: left to the handshakes",
  );
  assert.deepEqual(
    refusedPeers.map((r) => `${r.node}: ${r.what}: ${r.reason}`),
    ["site-b: address 192.168.50.10: also reported by node site-a (conflict: nobody's until an admin resolves it)"],
  );
  const kept = routableNodes(
    [
      kubeNode('site-a', '10.244.1.0/24'),
      kubeNode('site-b', '10.244.2.0/24', '192.168.50.10'),
      kubeNode('c', '10.244.3.0/24'),
    ],
    'c',
    reserved,
  );
  assert.deepEqual(
    kept.nodes.map((n) => [n.name, n.internalIP]),
    [
      ['site-a', undefined],
      ['site-b', '192.168.50.10'],
      ['c', '192.168.50.10'],
    ],
  );
  assert.match(kept.refusedPeers[0]?.reason ?? '', /^kept by node site-b/);
});
