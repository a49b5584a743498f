// A cluster's exposure, applied every reconcile: once the Service has its node ports, every apply
// names them as its targets. An apply without them pointed the Service back at the placeholder
// port until the next apply, and clients of a pod on another node were refused in between.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parse } from 'yaml';
import { KubeClient } from '../../../src/kube/client.ts';
import { ensureExposure } from '../../../src/operator/exposure.ts';
import type { KctlCluster } from '../../../src/operator/objects.ts';
import { fakeApiServer, json } from '../kube/fake-apiserver.ts';

const cluster: KctlCluster = {
  apiVersion: 'kctl.dev/v1alpha1',
  kind: 'KctlCluster',
  metadata: { name: 'f1', namespace: 'default', uid: 'u-1' },
  spec: { version: '0.3.0' },
};

test('a Service that has its node ports is applied with them as its targets, never the placeholder', async (t) => {
  const applied: { name: string; targetPort: number }[][] = [];
  const service = {
    spec: {
      clusterIP: '10.96.0.20',
      ports: [
        { name: 'api', port: 6443, targetPort: 31234, nodePort: 31234 },
        { name: 'konnectivity', port: 8132, targetPort: 31235, nodePort: 31235 },
      ],
    },
  };
  const api = await fakeApiServer(t, (req, res) => {
    if (req.method === 'GET' && req.path.endsWith('/nodes'))
      return json(res, 200, { items: [{ status: { addresses: [{ type: 'InternalIP', address: '10.0.0.5' }] } }] });
    if (req.method === 'GET') return json(res, 200, service);
    const body = parse(req.body) as { spec: { ports: { name: string; targetPort: number }[] } };
    applied.push(body.spec.ports);
    json(res, 200, service);
  });
  const exposure = await ensureExposure(
    new KubeClient({ server: api.url }),
    cluster,
    { fieldManager: 't', force: true },
    undefined,
  );
  assert.deepEqual(exposure, {
    ports: { api: 31234, agent: 31235 },
    address: '10.0.0.5',
    sans: ['10.96.0.20', 'f1.default.svc'],
    endpoint: 'https://10.0.0.5:31234',
    server: { url: 'https://10.0.0.5:31234' },
  });
  assert.equal(applied.length, 1);
  assert.deepEqual(
    applied[0]!.map((p) => [p.name, p.targetPort]),
    [
      ['api', 31234],
      ['konnectivity', 31235],
    ],
  );
});

test("behind the management cluster's front door: a ClusterIP Service with the handoff ports, kubeconfigs naming the door by the API's name, and no exposure while the operator has no door", async (t) => {
  const behind: KctlCluster = { ...cluster, spec: { ...cluster.spec, exposure: { type: 'FrontDoor' } } };
  const applied: { spec: { type: string; ports: { name: string; port: number; targetPort: number }[] } }[] = [];
  const api = await fakeApiServer(t, (req, res) => {
    if (req.method === 'GET' && req.path.endsWith('/nodes'))
      return json(res, 200, { items: [{ status: { addresses: [{ type: 'InternalIP', address: '10.0.0.5' }] } }] });
    if (req.method === 'GET') return json(res, 404, {});
    const body = parse(req.body) as (typeof applied)[number];
    applied.push(body);
    json(res, 200, { spec: { ...body.spec, clusterIP: '10.96.0.30' } });
  });
  const kube = new KubeClient({ server: api.url });
  const apply = { fieldManager: 't', force: true };
  const none = await ensureExposure(kube, behind, apply, undefined);
  assert.match(
    'waiting' in none ? none.waiting : '',
    /the operator has no front door; run it with --front-door-domain/,
  );
  assert.equal(applied.length, 0);

  const door = { domain: 'clusters.example.com', host: '192.0.2.10', port: 30443 };
  const exposure = await ensureExposure(kube, behind, apply, door);
  assert.deepEqual(exposure, {
    ports: { api: 6443, agent: 8132 },
    address: '10.96.0.30',
    sans: ['f1.default.svc'],
    endpoint: 'https://f1.clusters.example.com:30443',
    server: { url: 'https://192.0.2.10:30443', serverName: 'f1.clusters.example.com' },
    door,
  });
  assert.equal(applied[0]!.spec.type, 'ClusterIP');
  assert.deepEqual(
    applied[0]!.spec.ports.map((p) => `${p.name} ${p.port}->${p.targetPort}`),
    [
      'api 6443->6443',
      'konnectivity 8132->8132',
      'handoff-agent 8141->8141',
      'handoff-join 8142->8142',
      'handoff-nodeapi 8143->8143',
    ],
  );
});
