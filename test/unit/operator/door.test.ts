// The management cluster's front door's routes: each cluster behind it by its names to its
// Service's ClusterIP (the API straight, the nodes' endpoints to the handoff ports with the
// cluster's own key, derived from the door key); a cluster not behind the door, one without its
// Service yet, and the younger of two of one name get no route; without the door key only the
// API names route.
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { test } from 'node:test';
import { quietLogger } from '../konnectivity/fixtures.ts';
import { KubeClient } from '../../../src/kube/client.ts';
import { ManagementDoorComponent } from '../../../src/operator/door.ts';
import type { KctlCluster } from '../../../src/operator/objects.ts';
import { fakeApiServer, json } from '../kube/fake-apiserver.ts';
import { waitFor } from '../../wait.ts';

const cluster = (
  namespace: string,
  name: string,
  created: string,
  exposure?: 'FrontDoor' | 'NodePort',
  profile?: 'api-only',
): KctlCluster => ({
  apiVersion: 'kctl.dev/v1alpha1',
  kind: 'KctlCluster',
  metadata: { name, namespace, uid: `uid-${namespace}-${name}`, creationTimestamp: created, resourceVersion: '1' },
  spec: {
    version: '0.3.0',
    ...(exposure ? { exposure: { type: exposure } } : {}),
    ...(profile ? { config: { profile } } : {}),
  },
});

const service = (namespace: string, name: string, clusterIP: string) => ({
  metadata: { name, namespace, resourceVersion: '1' },
  spec: { clusterIP },
});

async function doorWith(t: { after: (fn: () => Promise<void>) => void }, key?: Buffer) {
  const clusters = [
    cluster('a', 'f1', '2026-11-01T00:00:00Z', 'FrontDoor'),
    cluster('b', 'f1', '2026-11-02T00:00:00Z', 'FrontDoor'),
    cluster('a', 'api1', '2026-11-01T00:00:00Z', 'FrontDoor', 'api-only'),
    cluster('a', 'np', '2026-11-01T00:00:00Z', 'NodePort'),
    cluster('a', 'noservice', '2026-11-01T00:00:00Z', 'FrontDoor'),
  ];
  const services = [
    service('a', 'f1', '10.96.0.11'),
    service('b', 'f1', '10.96.0.12'),
    service('a', 'api1', '10.96.0.13'),
    service('a', 'np', '10.96.0.14'),
  ];
  const api = await fakeApiServer(t, (req, res) => {
    // Watches stay open and quiet: the lists are the whole story.
    if (req.query.get('watch') === 'true') return void res.writeHead(200, { 'content-type': 'application/json' });
    if (req.path.endsWith('/kctlclusters'))
      return json(res, 200, { metadata: { resourceVersion: '1' }, items: clusters });
    if (req.path.endsWith('/services')) return json(res, 200, { metadata: { resourceVersion: '1' }, items: services });
    if (req.path.endsWith('/secrets/kctl-front-door'))
      return key ? json(res, 200, { data: { key: key.toString('base64') } }) : json(res, 404, {});
    json(res, 404, {});
  });
  const door = new ManagementDoorComponent({
    kube: new KubeClient({ server: api.url }),
    domain: 'clusters.example.com',
    port: 0,
    address: '127.0.0.1',
  });
  await door.init({ log: quietLogger(), statuses: () => [] });
  t.after(() => door.stop());
  await door.start();
  return door;
}

test("the door routes each cluster behind it by name to its Service, the nodes' names with the cluster's own key; the older of two names wins", async (t) => {
  const key = Buffer.alloc(32, 7);
  const door = await doorWith(t, key);
  const route = (name: string) => door.route(name);
  await waitFor('the routes', 5_000, async () => (await route('konnectivity.f1.clusters.example.com')) !== undefined);
  const ownKey = createHmac('sha256', key).update('kctl-front-door/uid-a-f1').digest('hex');
  assert.deepEqual(await route('F1.clusters.example.com'), {
    cluster: 'a/f1',
    endpoint: 'api',
    host: '10.96.0.11',
    port: 6443,
  });
  assert.deepEqual(await route('konnectivity.f1.clusters.example.com'), {
    cluster: 'a/f1',
    endpoint: 'konnectivity',
    host: '10.96.0.11',
    port: 8141,
    key: ownKey,
  });
  assert.equal((await route('join.f1.clusters.example.com'))?.port, 8142);
  assert.equal((await route('node-api.f1.clusters.example.com'))?.port, 8143);
  // An api-only cluster has no nodes' names; a NodePort cluster and one without its Service have none.
  assert.equal((await route('api1.clusters.example.com'))?.host, '10.96.0.13');
  assert.equal(await route('konnectivity.api1.clusters.example.com'), undefined);
  assert.equal(await route('np.clusters.example.com'), undefined);
  assert.equal(await route('noservice.clusters.example.com'), undefined);
  assert.equal(await route('f1.elsewhere.example.com'), undefined);
});

test('without the door key only the API names route (the operator makes the key)', async (t) => {
  const door = await doorWith(t);
  await waitFor('the routes', 5_000, async () => (await door.route('f1.clusters.example.com')) !== undefined);
  assert.equal(await door.route('konnectivity.f1.clusters.example.com'), undefined);
});
