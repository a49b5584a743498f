// The upgrade steps kctl takes and refuses: one Kubernetes (and etcd) minor at a time, nothing back.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { compareVersions } from '../../../src/base/version.ts';
import { skewProblem } from '../../../src/kube/version-skew.ts';

test('versions sort by semver precedence: pre-releases before their release, numeric identifiers as numbers', () => {
  const sorted = [
    '0.1.0',
    '0.1.0-prev.1',
    '0.1.0-prev.10',
    '0.1.0-prev.2',
    '0.1.0-alpha',
    '0.0.9',
    'v0.1.1',
    '1.0.0',
  ].sort(compareVersions);
  assert.deepEqual(sorted, [
    '0.0.9',
    '0.1.0-alpha',
    '0.1.0-prev.1',
    '0.1.0-prev.2',
    '0.1.0-prev.10',
    '0.1.0',
    'v0.1.1',
    '1.0.0',
  ]);
  assert.equal(compareVersions('v1.36.3', '1.36.3'), 0);
  assert.throws(() => compareVersions('1.36', '1.36.3'), /"1\.36" is not a version/);
});

const at = (name: string, version: string, kubernetes: string, etcd = 'v3.6.14') => ({
  name,
  version,
  kubernetes,
  etcd,
});
const target = { version: '0.2.0', kubernetes: 'v1.37.2', etcd: 'v3.6.14' };

test('one Kubernetes minor step, a patch step, and a member already at the target are allowed', () => {
  assert.equal(skewProblem([at('c1', '0.1.0', 'v1.36.3'), at('c2', '0.2.0', 'v1.37.2')], target), undefined);
  assert.equal(skewProblem([at('n1', '0.1.0', 'v1.37.0')], target), undefined);
});

test('a skipped Kubernetes minor is refused, naming the member and the release to go through', () => {
  assert.equal(
    skewProblem([at('c1', '0.1.0', 'v1.37.2'), at('node w1', '0.1.0', 'v1.35.4')], target),
    'node w1: Kubernetes v1.35.4 -> v1.37.2 skips minor version 1.36 (upgrade to a 1.36 release first)',
  );
});

test('downgrades are refused: of kctl, of Kubernetes, of etcd', () => {
  assert.match(
    skewProblem([at('c1', '0.3.0', 'v1.37.2')], target)!,
    /kctl 0\.2\.0 is older than 0\.3\.0, which c1 runs \(no downgrades\)/,
  );
  assert.match(
    skewProblem([at('c1', '0.1.0', 'v1.37.3')], target)!,
    /c1: Kubernetes v1\.37\.2 is older than the running v1\.37\.3/,
  );
  assert.match(
    skewProblem([at('c1', '0.1.0', 'v1.37.0', 'v3.7.0')], target)!,
    /c1: etcd v3\.6\.14 is older than the running v3\.7\.0/,
  );
});

test('an etcd step that skips a minor or changes the major is refused', () => {
  assert.match(
    skewProblem([at('c1', '0.1.0', 'v1.37.0', 'v3.4.30')], target)!,
    /etcd v3\.4\.30 -> v3\.6\.14 skips minor version 3\.5/,
  );
  assert.match(skewProblem([at('c1', '0.1.0', 'v1.37.0', 'v2.3.8')], target)!, /changes the major version/);
});
