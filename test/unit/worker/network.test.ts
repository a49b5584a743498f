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
  assert.equal(api.requests.filter((r) => r.path === '/api/v1/nodes' && !r.query.get('watch')).length, 1, 'one list, then the watch: no polling');
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
  await assert.rejects(net.ready(AbortSignal.timeout(300)), /node edge-1 has no podCIDR: GET \/api\/v1\/nodes: 403 nodes is forbidden/);
});

test("a peer's self-declared pod range is not routed: the honest node keeps the route to its own, in every mode", async () => {
  const { desiredRoutes, routableNodes } = await import('../../../src/worker/overlay.ts');
  const kubeNode = (name: string, ip: string, ...podCIDRs: string[]) => ({
    metadata: { name },
    spec: { podCIDR: podCIDRs[0], podCIDRs },
    status: { addresses: [{ type: 'InternalIP', address: ip }] },
  });
  const space = { podCIDRs: ['10.244.0.0/16'], podRangeBits: 24 };
  for (const lie of ['10.244.1.0/25', '10.244.1.5/32', '0.0.0.0/0']) {
    const { nodes, refused } = routableNodes(
      [kubeNode('self', '192.0.2.1', '10.244.0.0/24'), kubeNode('w1', '192.0.2.2', '10.244.1.0/24'), kubeNode('evil', '192.0.2.3', lie)],
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
  const { nodes } = routableNodes([kubeNode('evil', '192.0.2.3', '0.0.0.0/0')], 'self', { podCIDRs: ['10.244.0.0/16'] });
  assert.equal(nodes[0]?.podCIDR, undefined);
});
