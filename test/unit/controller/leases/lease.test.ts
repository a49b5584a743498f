// The controller lease component against an in-memory API (leases listed, watched, applied,
// deleted): the server count a konnectivity server announces follows the live leases, the lease
// lists the agents the server holds and is rewritten soon after they change, and it goes on stop.
import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { test } from 'node:test';
import { parseConfig } from '../../../../src/controller/config/config.ts';
import { ControllerLeaseComponent, LiveControllers } from '../../../../src/controller/leases/lease.ts';
import { KubeClient } from '../../../../src/kube/client.ts';
import { controllerLease, controllerLeaseName, type Lease } from '../../../../src/kube/controller-leases.ts';
import { captureLogger } from '../../../helpers.ts';
import { makePki, rawAgent, startServer } from '../../konnectivity/fixtures.ts';
import { waitFor } from '../../../wait.ts';
import { fakeApiServer, json, watchStream } from '../../kube/fake-apiserver.ts';

const RELEASE = { version: '0.1.0', kubernetes: 'v1.36.3', etcd: 'v3.6.14' };

const LEASES = '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases';
/** The copy nodes read. */
const NODE_LEASES = '/apis/coordination.k8s.io/v1/namespaces/kctl-controllers/leases';

/** An API server that keeps leases in memory and tells open watches about every change. */
async function leaseApi(t: Parameters<typeof fakeApiServer>[0], initial: Lease[]) {
  const leases = new Map(initial.map((l) => [l.metadata.name, l]));
  const nodeLeases = new Map<string, Lease>();
  const watches: ReturnType<typeof watchStream>[] = [];
  let rv = 1;
  const stamp = (l: Lease): Lease => ({ ...l, metadata: { ...l.metadata, resourceVersion: String(++rv) } });
  const notify = (type: string, l: Lease) => {
    for (const w of watches) w.event(type, l);
  };
  const api = await fakeApiServer(t, (req, res: ServerResponse) => {
    if (req.path.startsWith(`${NODE_LEASES}/`)) {
      const name = req.path.slice(NODE_LEASES.length + 1);
      if (req.method === 'PATCH') nodeLeases.set(name, JSON.parse(req.body) as Lease);
      else if (req.method === 'DELETE') nodeLeases.delete(name);
      return json(res, 200, {});
    }
    const name = req.path.startsWith(`${LEASES}/`) ? req.path.slice(LEASES.length + 1) : undefined;
    if (req.method === 'GET' && req.query.get('watch') === 'true') {
      watches.push(watchStream(res));
      return;
    }
    if (req.method === 'GET')
      return json(res, 200, { metadata: { resourceVersion: String(rv) }, items: [...leases.values()] });
    if (req.method === 'PATCH' && name) {
      const l = stamp(JSON.parse(req.body) as Lease);
      const type = leases.has(name) ? 'MODIFIED' : 'ADDED';
      leases.set(name, l);
      notify(type, l);
      return json(res, 200, l);
    }
    if (req.method === 'DELETE' && name) {
      const l = leases.get(name);
      leases.delete(name);
      if (l) notify('DELETED', stamp(l));
      return json(res, l ? 200 : 404, {});
    }
    json(res, 405, {});
  });
  return {
    api,
    leases,
    nodeLeases,
    remove(n: string) {
      const l = leases.get(n)!;
      leases.delete(n);
      notify('DELETED', stamp(l));
    },
  };
}

test('the announced server count follows the live leases; the lease lists the held agents and goes on stop', async (t) => {
  const now = new Date();
  const other = JSON.parse(
    JSON.stringify(
      controllerLease(
        'kctl-controller-b',
        { apiServer: 'https://b:6443', konnectivity: 'b:8132', agents: ['w1'] },
        now,
      ),
    ),
  ) as Lease;
  const expired = JSON.parse(
    JSON.stringify(
      controllerLease(
        'kctl-controller-c',
        { apiServer: 'https://c:6443', konnectivity: 'c:8132', agents: [] },
        new Date(now.getTime() - 60_000),
      ),
    ),
  ) as Lease;
  const fake = await leaseApi(t, [other, expired]);
  const cfg = parseConfig({ spec: { api: { address: '10.0.0.1' } } }, 'kctl.yaml');
  let agents = ['w1'];
  const loaded: { keys?: string } = {};
  const kube = new KubeClient({ server: fake.api.url });
  const controllers = new LiveControllers(controllerLeaseName('10.0.0.1'), kube);
  const lease = new ControllerLeaseComponent({
    cfg,
    kube,
    controllers,
    agents: { agentIds: () => agents },
    encryption: { loadedKeys: () => loaded.keys },
    release: RELEASE,
  });
  await lease.init({ log: captureLogger().log, statuses: () => [] });
  await lease.start();
  t.after(() => lease.stop());

  // A konnectivity server wired as the controller wires it: servercount from the live controllers.
  const pki = await makePki();
  const server = await startServer(t, pki, { serverId: 'a', serverCount: () => controllers.serverCount() });
  await waitFor('itself and b live, c expired', 10_000, async () => controllers.serverCount() === 2);
  const first = await rawAgent(t, pki, server, { agentId: 'w1' });
  assert.deepEqual(first.headers.get('servercount'), ['2']);
  const own = fake.leases.get('kctl-controller-10-0-0-1');
  assert.equal(own?.metadata.annotations?.['kctl.dev/agents'], 'w1');
  assert.equal(own?.metadata.annotations?.['kctl.dev/konnectivity'], '10.0.0.1:8132');
  // The same lease where nodes read it (a namespace that holds nothing else).
  const forNodes = fake.nodeLeases.get('kctl-controller-10-0-0-1');
  assert.equal(forNodes?.metadata.annotations?.['kctl.dev/konnectivity'], '10.0.0.1:8132');
  assert.equal((forNodes?.metadata as { namespace?: string } | undefined)?.namespace, 'kctl-controllers');
  assert.equal(
    own?.metadata.annotations?.['kctl.dev/encryption-keys'],
    undefined,
    'keys named before kube-apiserver loaded them',
  );

  // b stops (its lease is deleted): the next agent is told one server, with no restart.
  fake.remove('kctl-controller-b');
  await waitFor('b gone', 10_000, async () => controllers.serverCount() === 1);
  const second = await rawAgent(t, pki, server, { agentId: 'w2' });
  assert.deepEqual(second.headers.get('servercount'), ['1']);
  assert.deepEqual(
    controllers.liveControllers().map((c) => c.name),
    ['kctl-controller-10-0-0-1'],
  );

  // The held agents change: the lease says so within seconds, not at the next 10 s renewal.
  agents = ['w1', 'w2'];
  await waitFor(
    'agents rewritten',
    10_000,
    async () => fake.leases.get('kctl-controller-10-0-0-1')?.metadata.annotations?.['kctl.dev/agents'] === 'w1,w2',
  );
  // So do the encryption keys kube-apiserver has loaded (names only), which rotate-key waits for.
  loaded.keys = 'key-b,key-a';
  await waitFor(
    'keys named',
    10_000,
    async () =>
      fake.leases.get('kctl-controller-10-0-0-1')?.metadata.annotations?.['kctl.dev/encryption-keys'] === 'key-b,key-a',
  );
  await waitFor(
    'keys read back',
    10_000,
    async () =>
      controllers.liveControllers().find((c) => c.name === 'kctl-controller-10-0-0-1')?.encryptionKeys ===
      'key-b,key-a',
  );
  // Each renewal writes kube-system's lease, then the nodes' copy: count once both are written.
  await waitFor(
    "keys in the nodes' copy",
    10_000,
    async () =>
      fake.nodeLeases.get('kctl-controller-10-0-0-1')?.metadata.annotations?.['kctl.dev/encryption-keys'] ===
      'key-b,key-a',
  );
  const patches = fake.api.requests.filter((r) => r.method === 'PATCH').length;
  await new Promise((r) => setTimeout(r, 2500));
  assert.equal(
    fake.api.requests.filter((r) => r.method === 'PATCH').length,
    patches,
    'rewritten although nothing changed',
  );

  await lease.stop();
  assert.equal(fake.leases.has('kctl-controller-10-0-0-1'), false, 'the lease outlived the controller');
  assert.equal(fake.nodeLeases.has('kctl-controller-10-0-0-1'), false, "the nodes' copy outlived the controller");
});
