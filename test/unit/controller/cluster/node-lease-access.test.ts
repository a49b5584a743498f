import assert from 'node:assert/strict';
import test from 'node:test';
import { nodesOnKubeSystemLeases } from '../../../../src/controller/cluster/node-lease-access.ts';

test("kube-system's leases stay readable for nodes while one says it runs an older kctl, or says nothing", () => {
  const versions = (entries: [string, string | undefined][]) => new Map(entries);
  assert.deepEqual(nodesOnKubeSystemLeases(versions([])), []);
  assert.deepEqual(
    nodesOnKubeSystemLeases(
      versions([
        ['w1', '0.2.0'],
        ['w2', '0.2.1-broken'],
        ['w3', '1.0.0'],
      ]),
    ),
    [],
  );
  assert.deepEqual(
    nodesOnKubeSystemLeases(
      versions([
        ['w2', '0.2.0-prev.1'],
        ['w1', '0.2.0'],
        ['w3', undefined],
        ['w4', '0.1.9'],
        ['w5', 'not a version'],
      ]),
    ),
    ['w2', 'w3', 'w4', 'w5'],
    'a pre-release of the version, an unnamed release, an older one and an unreadable one all keep the right',
  );
});
