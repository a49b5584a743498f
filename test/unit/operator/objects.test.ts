// What a KctlCluster becomes: its config keeps the object's fields and takes the address, names
// and data source the operator decides; its Deployment runs the kctl image of its version with its
// CAs from the Secret; everything is owned by the object; its database is its own.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parse } from 'yaml';
import { parseConfig } from '../../../src/controller/config/config.ts';
import { frontDoorEndpoint } from '../../../src/controller/config/urls.ts';
import {
  deployment,
  disruptionBudget,
  hostedConfig,
  HOSTED_GC_PERCENT,
  secret,
  service,
  type KctlCluster,
} from '../../../src/operator/objects.ts';
import { databaseOf } from '../../../src/operator/datastore.ts';
import { portsOf } from '../../../src/operator/exposure.ts';
import { objectPath } from '../../../src/kube/paths.ts';

const cluster: KctlCluster = {
  apiVersion: 'kctl.dev/v1alpha1',
  kind: 'KctlCluster',
  metadata: { name: 'edge-1', namespace: 'team-a', uid: 'u-1' },
  spec: {
    version: '0.3.0',
    replicas: 2,
    config: { profile: 'api-only', api: { sans: ['api.example.com'] }, network: { serviceCIDR: '10.60.0.0/16' } },
    exposure: { type: 'NodePort', nodePort: 30700 },
    resources: { requests: { memory: '200Mi' } },
  },
};

test("the hosted config keeps the object's fields and loads as a config file", () => {
  const text = hostedConfig(cluster, {
    address: '10.0.0.5',
    sans: ['10.0.0.5', '10.0.0.6'],
    dataSource: 'postgres://u@db:5432/kctl_team_a_edge_1',
    ports: { api: 30700 },
  });
  const cfg = parseConfig(parse(text), 'the hosted config');
  assert.equal(cfg.spec.profile, 'api-only');
  assert.equal(cfg.spec.api.address, '10.0.0.5');
  // The pods listen on the node port: what the cluster names is what a client outside dials.
  assert.equal(cfg.spec.api.port, 30700);
  assert.deepEqual(cfg.spec.api.sans, ['api.example.com', '10.0.0.5', '10.0.0.6']);
  assert.equal(cfg.spec.network.serviceCIDR, '10.60.0.0/16');
  // Many control planes share a management node: a GOGC for density, unless its config sets one.
  assert.equal(cfg.spec.gcPercent, HOSTED_GC_PERCENT);
  assert.equal(cfg.spec.storage.kine.dataSource, 'postgres://u@db:5432/kctl_team_a_edge_1');
  // A bound on its connections to the shared PostgreSQL, unless its config names one.
  assert.equal(cfg.spec.storage.kine.maxOpenConnections, 15);
  assert.equal(cfg.spec.storage.kine.maxIdleConnections, 5);
  const own = {
    ...cluster,
    spec: { ...cluster.spec, config: { gcPercent: 100, storage: { kine: { maxOpenConnections: 40 } } } },
  };
  const ownCfg = parseConfig(
    parse(hostedConfig(own, { address: '10.0.0.5', sans: [], dataSource: 'postgres://u@db/x', ports: { api: 30700 } })),
    'the hosted config',
  );
  assert.equal(ownCfg.spec.storage.kine.maxOpenConnections, 40);
  assert.equal(ownCfg.spec.gcPercent, 100);
  assert.equal(ownCfg.spec.storage.kine.dataSource, 'postgres://u@db/x');
  // The object itself is left as it was.
  assert.deepEqual(cluster.spec.config?.api, { sans: ['api.example.com'] });
});

test("behind the management cluster's door: the config names the door for its nodes, the pods take its handoffs with the key from their config Secret", () => {
  const behind: KctlCluster = {
    ...cluster,
    spec: { version: '0.3.0', config: { frontDoor: { enabled: false } }, exposure: { type: 'FrontDoor' } },
  };
  const door = { domain: 'clusters.example.com', host: '192.0.2.10', port: 30443 };
  const text = hostedConfig(behind, {
    address: '10.96.0.30',
    sans: [],
    dataSource: 'postgres://u@db/x',
    ports: { api: 6443, agent: 8132 },
    door,
  });
  const cfg = parseConfig(parse(text), 'the hosted config');
  // The door wins over what the object's config said of a door of its own.
  assert.deepEqual(frontDoorEndpoint(cfg), {
    address: '192.0.2.10:30443',
    api: 'edge-1.clusters.example.com',
    konnectivity: 'konnectivity.edge-1.clusters.example.com',
    join: 'join.edge-1.clusters.example.com',
    nodeApi: 'node-api.edge-1.clusters.example.com',
    nodeLocal: '198.18.0.1:6443',
  });
  assert.deepEqual(cfg.spec.frontDoor.external, {
    keyFile: '/etc/kctl/door.key',
    handoffPorts: { konnectivity: 8141, join: 8142, nodeApi: 8143 },
  });
  const pod = deployment(behind, { ports: { api: 6443, agent: 8132 }, configHash: 'h' }).spec.template.spec;
  const c = pod.containers[0]!;
  assert.deepEqual(
    c.ports.map((p) => `${p.name} ${p.containerPort}`),
    ['api 6443', 'konnectivity 8132', 'handoff-agent 8141', 'handoff-join 8142', 'handoff-nodeapi 8143'],
  );
  assert.ok(c.volumeMounts.some((m) => m.mountPath === '/etc/kctl/door.key' && m.subPath === 'door.key'));
  // Not behind the door: no handoff ports, no key.
  const plain = deployment(cluster, { ports: { api: 30700 }, configHash: 'h' }).spec.template.spec.containers[0]!;
  assert.ok(!plain.ports.some((p) => p.name.startsWith('handoff')));
  assert.ok(!plain.volumeMounts.some((m) => m.mountPath === '/etc/kctl/door.key'));
});

test('the Deployment runs the kctl image of its version, its replicas, its CAs from the Secret; all owned by the object', () => {
  const d = deployment(cluster, { ports: { api: 30700 }, configHash: 'h1' });
  assert.equal(d.spec.replicas, 2);
  const pod = d.spec.template.spec;
  assert.equal(pod.containers[0]!.image, 'kctl.local/kctl:v0.3.0');
  assert.deepEqual(pod.containers[0]!.args, [
    'controller',
    '--config',
    '/etc/kctl/kctl.yaml',
    '--shared-pki',
    '/etc/kctl/pki',
  ]);
  assert.deepEqual(pod.containers[0]!.resources, { requests: { memory: '200Mi' } });
  // Its pods share one address: each takes its own name among the controllers from its pod's name.
  assert.deepEqual(pod.containers[0]!.env, [
    { name: 'KCTL_MEMBER_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
  ]);
  // Spread over nodes where they allow, and a drain takes one at a time.
  const spread = pod.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]!.podAffinityTerm;
  assert.deepEqual(spread, {
    labelSelector: { matchLabels: { 'kctl.dev/cluster': 'edge-1' } },
    topologyKey: 'kubernetes.io/hostname',
  });
  assert.deepEqual(disruptionBudget(cluster).spec, {
    maxUnavailable: 1,
    selector: { matchLabels: { 'kctl.dev/cluster': 'edge-1' } },
  });
  // Without spec.resources, the profile's measured size: the scheduler spreads clusters by it.
  const bare = (profile: string) =>
    deployment(
      { ...cluster, spec: { version: '0.3.0', config: { profile } } },
      { ports: { api: 30700 }, configHash: 'h1' },
    ).spec.template.spec.containers[0]!.resources;
  assert.deepEqual(bare('api-only'), { requests: { cpu: '50m', memory: '200Mi' } });
  assert.deepEqual(bare('full'), { requests: { cpu: '100m', memory: '320Mi' } });
  assert.deepEqual(pod.containers[0]!.ports, [{ name: 'api', containerPort: 30700 }]);
  assert.equal(d.spec.template.metadata.annotations['kctl.dev/config-hash'], 'h1');
  assert.deepEqual(pod.volumes[1], { name: 'pki', secret: { secretName: 'edge-1-pki', defaultMode: 0o400 } });
  for (const o of [d, service(cluster), disruptionBudget(cluster), secret(cluster, 'edge-1-config', {})]) {
    assert.equal(o.metadata.namespace, 'team-a');
    // kctl's client knows where each one goes.
    assert.match(objectPath(o), new RegExp(`^/apis?/.*/namespaces/team-a/[a-z]+/${o.metadata.name}$`));
    assert.deepEqual(o.metadata.ownerReferences[0], {
      apiVersion: 'kctl.dev/v1alpha1',
      kind: 'KctlCluster',
      name: 'edge-1',
      uid: 'u-1',
      controller: true,
      blockOwnerDeletion: true,
    });
  }
  assert.deepEqual(service(cluster).spec.ports, [{ name: 'api', port: 6443, targetPort: 30700, nodePort: 30700 }]);
  assert.equal(
    service({ ...cluster, spec: { ...cluster.spec, exposure: { type: 'ClusterIP' } } }).spec.type,
    'ClusterIP',
  );
});

test('a full cluster is reached on two node ports, which its pods listen on; Kubernetes may pick them', () => {
  const full: KctlCluster = { ...cluster, spec: { version: '0.3.0', exposure: { agentNodePort: 30701 } } };
  // First apply: the API's node port left to Kubernetes, its target a placeholder.
  assert.deepEqual(service(full).spec.ports, [
    { name: 'api', port: 6443, targetPort: 6443 },
    { name: 'konnectivity', port: 8132, targetPort: 30701, nodePort: 30701 },
  ]);
  const given = {
    spec: {
      ports: [
        { name: 'api', nodePort: 31234 },
        { name: 'konnectivity', nodePort: 30701 },
      ],
    },
  };
  const ports = portsOf(full, given)!;
  assert.deepEqual(ports, { api: 31234, agent: 30701 });
  assert.deepEqual(service(full, ports).spec.ports, [
    { name: 'api', port: 6443, targetPort: 31234, nodePort: 31234 },
    { name: 'konnectivity', port: 8132, targetPort: 30701, nodePort: 30701 },
  ]);
  // Until both are given there are no ports to write into the config.
  assert.equal(portsOf(full, { spec: { ports: [{ name: 'api', nodePort: 31234 }] } }), undefined);
  const cfg = parseConfig(
    parse(hostedConfig(full, { address: '10.0.0.5', sans: [], dataSource: 'postgres://u@db/x', ports })),
    'the hosted config',
  );
  assert.equal(cfg.spec.api.port, 31234);
  assert.equal(cfg.spec.konnectivity.agentPort, 30701);
  const pod = deployment(full, { ports, configHash: 'h' }).spec.template.spec.containers[0]!;
  assert.deepEqual(pod.ports, [
    { name: 'api', containerPort: 31234 },
    { name: 'konnectivity', containerPort: 30701 },
  ]);
  // Other Service types: the pods' own ports.
  const inside = { ...full, spec: { ...full.spec, exposure: { type: 'ClusterIP' as const } } };
  assert.deepEqual(portsOf(inside, {}), { api: 6443, agent: 8132 });
});

test("each cluster has a database of its own, named by namespace and name, never another's", () => {
  assert.match(databaseOf(cluster), /^kctl_team_a_edge_1_[0-9a-f]{8}$/);
  const other = { ...cluster, metadata: { ...cluster.metadata, namespace: 'team', name: 'a-edge-1' } };
  assert.notEqual(databaseOf(other), databaseOf(cluster));
  const long = { ...cluster, metadata: { ...cluster.metadata, name: 'x'.repeat(253) } };
  assert.ok(databaseOf(long).length <= 63, databaseOf(long));
});
