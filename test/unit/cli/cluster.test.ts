// `kctl cluster list` from the objects' status: readiness, version (and the one it rolls to), Kubernetes,
// control-plane pods ready of wanted, nodes, endpoint.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { clusterEntry, clusterTable } from '../../../src/cli/cluster.ts';
import type { KctlCluster } from '../../../src/operator/objects.ts';

const object = (name: string, status: Record<string, unknown>): KctlCluster => ({
  apiVersion: 'kctl.dev/v1alpha1',
  kind: 'KctlCluster',
  metadata: { name, namespace: 'team-a', uid: `u-${name}` },
  spec: { version: '0.3.0', replicas: 2 },
  status,
});

test("the list shows each cluster's pods ready of wanted beside its nodes, and a roll under way", () => {
  const scaling = clusterEntry(
    object('f1', {
      conditions: [{ type: 'Ready', status: 'True', reason: 'ApiServing' }],
      version: '0.3.0',
      kubernetesVersion: '1.36.3',
      replicas: 2,
      readyReplicas: 1,
      nodes: 3,
      nodesReady: 3,
      endpoint: 'https://10.0.0.5:30700',
    }),
  );
  assert.deepEqual(scaling.pods, { ready: 1, wanted: 2 });
  const fresh = clusterEntry(object('f2', {}));
  assert.equal(fresh.pods, undefined);
  assert.equal(fresh.ready, 'Unknown');
  const [head, one, two] = clusterTable([scaling, fresh]);
  assert.match(head!, /^NAMESPACE\s+NAME\s+READY\s+PROFILE\s+VERSION\s+KUBERNETES\s+PODS\s+NODES\s+ENDPOINT$/);
  assert.match(one!, /^team-a\s+f1\s+True\s+full\s+0\.3\.0\s+1\.36\.3\s+1\/2\s+3\/3\s+https:\/\/10\.0\.0\.5:30700$/);
  assert.match(two!, /^team-a\s+f2\s+Unknown\s+full\s+- -> 0\.3\.0\s+-\s+-\s+-\s+-$/);
});
