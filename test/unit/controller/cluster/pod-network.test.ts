import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { parseConfig } from '../../../../src/controller/config/config.ts';
import { publishPodNetwork } from '../../../../src/controller/cluster/pod-network.ts';
import { KubeClient } from '../../../../src/kube/client.ts';
import { POD_NETWORK_PATH } from '../../../../src/kube/pod-network.ts';
import { captureLogger } from '../../../helpers.ts';
import { fakeApiServer, json } from '../../kube/fake-apiserver.ts';

const CLUSTER_INFO = '/api/v1/namespaces/kube-public/configmaps/cluster-info';

/** An API with these objects by path; server-side apply (PATCH) stores the body. */
async function apiWith(t: TestContext, objects: Record<string, unknown>) {
  const store = new Map(Object.entries(objects));
  const api = await fakeApiServer(t, (req, res) => {
    if (req.method === 'PATCH') {
      store.set(req.path, JSON.parse(req.body) as unknown);
      return json(res, 200, store.get(req.path));
    }
    const o = store.get(req.path);
    if (!o) return json(res, 404, { kind: 'Status', code: 404, reason: 'NotFound' });
    json(res, 200, o);
  });
  return { kube: new KubeClient({ server: api.url }), store, api };
}

const config = (network: Record<string, unknown> = {}) =>
  parseConfig({ spec: { api: { address: '10.0.0.1' }, network } }, 'test');
/** What a controller of today records (the test config's pod CIDR and kctl's node range size). */
const recorded = (mode: string) => ({
  data: {
    mode,
    vxlanVNI: '1',
    vxlanPort: '8472',
    clusterCIDR: '10.244.0.0/16',
    nodeRangeBits: '24',
    serviceCIDR: '10.96.0.0/12',
  },
});
const modeIn = (store: Map<string, unknown>) =>
  (store.get(POD_NETWORK_PATH) as { data: { mode: string } } | undefined)?.data.mode;

test('a new cluster without spec.network.mode runs routes, and says so to its nodes', async (t) => {
  const { kube, store } = await apiWith(t, {});
  assert.equal((await publishPodNetwork(kube, config(), captureLogger().log)).mode, 'routes');
  assert.equal(modeIn(store), 'routes');
});

test('a cluster from before modes stays on routes when its controller upgrades, whatever the default', async (t) => {
  const { kube, store } = await apiWith(t, { [CLUSTER_INFO]: { data: {} } });
  assert.equal((await publishPodNetwork(kube, config(), captureLogger().log)).mode, 'routes');
  assert.equal(modeIn(store), 'routes');
});

test('an unset mode keeps what the cluster runs; a set one switches it, and the switch is logged', async (t) => {
  const { kube, store, api } = await apiWith(t, {
    [CLUSTER_INFO]: { data: {} },
    [POD_NETWORK_PATH]: recorded('vxlan'),
  });
  const { log, raw } = captureLogger();
  assert.equal((await publishPodNetwork(kube, config(), log)).mode, 'vxlan');
  assert.equal(
    api.requests.filter((r) => r.method === 'PATCH').length,
    0,
    'nothing is written when the cluster already runs what the config says',
  );
  assert.equal((await publishPodNetwork(kube, config({ mode: 'routes' }), log)).mode, 'routes');
  assert.equal(modeIn(store), 'routes');
  assert.match(raw(), /pod network mode switched from vxlan to routes/);
});

test('a record from before pod ranges were published gains them, and nodes read them', async (t) => {
  const older = { data: { mode: 'vxlan', vxlanVNI: '1', vxlanPort: '8472', policy: 'true' } };
  const { kube, store } = await apiWith(t, { [CLUSTER_INFO]: { data: {} }, [POD_NETWORK_PATH]: older });
  const published = await publishPodNetwork(kube, config(), captureLogger().log);
  assert.deepEqual(published.ranges, { clusterCIDR: '10.244.0.0/16', nodeBits: 24, serviceCIDR: '10.96.0.0/12' });
  assert.deepEqual((store.get(POD_NETWORK_PATH) as { data: Record<string, string> }).data.nodeRangeBits, '24');
});

test("a damaged record is replaced by the config's mode, with a warning naming the bad key", async (t) => {
  const { kube, store } = await apiWith(t, { [POD_NETWORK_PATH]: recorded('gre') });
  const { log, raw } = captureLogger();
  assert.equal((await publishPodNetwork(kube, config({ mode: 'vxlan' }), log)).mode, 'vxlan');
  assert.equal(modeIn(store), 'vxlan');
  assert.match(raw(), /mode is \\"gre\\"/);
});

test('spec.network.mode and spec.network.vxlan: bad values name the field', () => {
  assert.equal(config().spec.network.mode, undefined);
  assert.deepEqual(config({ mode: 'vxlan' }).spec.network.vxlan, { vni: 1, port: 8472 });
  assert.throws(() => config({ mode: 'flannel' }), /spec\.network\.mode: .*"routes".*"vxlan"/);
  assert.throws(() => config({ vxlan: { vni: 0 } }), /spec\.network\.vxlan\.vni/);
  assert.throws(() => config({ vxlan: { port: 70000 } }), /spec\.network\.vxlan\.port/);
  assert.throws(() => config({ vxlan: { group: '239.1.1.1' } }), /spec\.network\.vxlan: unknown field\(s\) "group"/);
});

test('NetworkPolicy: on for a new cluster; a cluster from before policies keeps ignoring them until spec.network.policy says otherwise', async (t) => {
  const fresh = await apiWith(t, {});
  assert.equal((await publishPodNetwork(fresh.kube, config(), captureLogger().log)).policy, true);
  const policyIn = (store: Map<string, unknown>) =>
    (store.get(POD_NETWORK_PATH) as { data: { policy: string } } | undefined)?.data.policy;
  assert.equal(policyIn(fresh.store), 'true');

  const older = await apiWith(t, { [CLUSTER_INFO]: { data: {} } });
  assert.equal((await publishPodNetwork(older.kube, config(), captureLogger().log)).policy, false);
  // Made by a kctl with modes but before policies: its record has no policy key.
  const withModes = await apiWith(t, { [CLUSTER_INFO]: { data: {} }, [POD_NETWORK_PATH]: recorded('wireguard') });
  const { log, raw } = captureLogger();
  assert.equal((await publishPodNetwork(withModes.kube, config(), log)).policy, false);
  assert.equal((await publishPodNetwork(withModes.kube, config({ policy: true }), log)).policy, true);
  assert.equal(policyIn(withModes.store), 'true');
  assert.match(raw(), /NetworkPolicy enforcement switched on/);
  assert.equal(
    (await publishPodNetwork(withModes.kube, config(), log)).policy,
    true,
    'an unset policy keeps what the cluster does',
  );
});
