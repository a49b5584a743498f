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
