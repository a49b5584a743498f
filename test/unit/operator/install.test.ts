// The operator's manifests: the kctl image of the version, its own service account, and RBAC that
// names what it touches and no more (it deletes only Deployments, of deleted clusters, and the
// Secrets of credentials taken out of a spec: the garbage collector removes the rest they owned).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { operatorManifests } from '../../../src/operator/install.ts';

type Rule = { apiGroups: string[]; resources: string[]; verbs: string[]; resourceNames?: string[] };

test('the operator runs the kctl image of its version as its own service account, with least privilege', () => {
  const all = operatorManifests('0.3.0', 2) as {
    kind: string;
    metadata: { name: string };
    rules?: Rule[];
    spec?: unknown;
  }[];
  assert.deepEqual(
    all.map((m) => m.kind),
    ['Namespace', 'ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding', 'Deployment'],
  );
  const dep = all.find((m) => m.kind === 'Deployment')!.spec as {
    replicas: number;
    template: { spec: { serviceAccountName: string; containers: { image: string; args: string[] }[] } };
  };
  assert.equal(dep.replicas, 2);
  assert.equal(dep.template.spec.serviceAccountName, 'kctl-operator');
  assert.equal(dep.template.spec.containers[0]!.image, 'kctl.local/kctl:v0.3.0');
  assert.deepEqual(dep.template.spec.containers[0]!.args, ['operator', 'run']);
  const rules = all.flatMap((m) => m.rules ?? []);
  assert.ok(!rules.some((r) => r.verbs.includes('*') || r.resources.includes('*')));
  assert.deepEqual(
    rules.filter((r) => r.verbs.includes('delete')).map((r) => r.resources),
    [['secrets'], ['deployments']],
  );
  const lease = rules.find((r) => r.resources.includes('leases') && r.verbs.includes('update'));
  assert.deepEqual(lease?.resourceNames, ['kctl-operator']);
});

test('with a front door: the operator names it, and the door runs on every node (a DaemonSet) as its own account that reads KctlClusters, Services and the door key only, behind a node port', () => {
  const all = operatorManifests('0.3.0', 2, { domain: 'clusters.example.com', host: '192.0.2.10', port: 30443 }) as {
    kind: string;
    metadata: { name: string; namespace?: string };
    rules?: Rule[];
    spec?: {
      type?: string;
      ports?: { port: number; targetPort: number; nodePort?: number }[];
      template?: { spec: { serviceAccountName: string; containers: { args: string[] }[] } };
    };
  }[];
  const dep = (name: string) => all.find((m) => m.metadata.name === name && m.spec?.template)!.spec!.template!.spec;
  assert.deepEqual(dep('kctl-operator').containers[0]!.args, [
    'operator',
    'run',
    '--front-door-domain',
    'clusters.example.com',
    '--front-door-address',
    '192.0.2.10:30443',
  ]);
  // The door on every node: a DaemonSet.
  assert.equal(all.find((m) => m.metadata.name === 'kctl-front-door' && m.spec?.template)?.kind, 'DaemonSet');
  assert.equal(dep('kctl-front-door').serviceAccountName, 'kctl-front-door');
  assert.deepEqual(dep('kctl-front-door').containers[0]!.args, [
    'operator',
    'door',
    '--domain',
    'clusters.example.com',
    '--port',
    '8443',
  ]);
  const doorRules = all.filter((m) => m.metadata.name === 'kctl-front-door').flatMap((m) => m.rules ?? []);
  assert.deepEqual(
    doorRules.map((r) => `${r.resources.join()} ${r.verbs.join()} ${r.resourceNames?.join() ?? '*'}`),
    ['kctlclusters list,watch *', 'services list,watch *', 'secrets get kctl-front-door'],
  );
  const svc = all.find((m) => m.kind === 'Service')!.spec!;
  assert.equal(svc.type, 'NodePort');
  assert.deepEqual(
    svc.ports!.map((p) => [p.port, p.targetPort, p.nodePort]),
    [[8443, 8443, 30443]],
  );
  const lb = operatorManifests('0.3.0', 2, { domain: 'clusters.example.com', host: '192.0.2.10', port: 443 }).find(
    (m) => m.kind === 'Service',
  ) as { spec: { type: string; ports: { port: number }[] } };
  assert.equal(lb.spec.type, 'LoadBalancer');
  assert.equal(lb.spec.ports[0]!.port, 443);
});
