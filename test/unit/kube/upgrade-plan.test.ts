// The upgrade plan as a ConfigMap, and what members report about themselves in annotations.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  parseMemberUpgrade,
  parseReleaseString,
  planFromConfigMap,
  planToConfigMap,
  releaseString,
  type UpgradePlan,
} from '../../../src/kube/upgrade-plan.ts';

const plan: UpgradePlan = {
  target: { version: '0.2.0', kubernetes: 'v1.36.3', etcd: 'v3.6.14', sha256: 'a'.repeat(64), size: 162_655_643 },
  created: '2026-11-26T20:00:00.000Z',
  drain: true,
  drainTimeoutS: 300,
  maxUnavailable: 1,
  readyTimeoutS: 300,
  state: 'active',
  controllers: ['kctl-controller-10-0-0-1', 'kctl-controller-10-0-0-2'],
  admitted: {},
};

test('a plan survives the ConfigMap both ways, its reason and resourceVersion too', () => {
  assert.deepEqual(planFromConfigMap(planToConfigMap(plan)), plan);
  const stopped = {
    ...plan,
    state: 'stopped' as const,
    reason: 'c1 was not ready at 0.2.0 within 300 s; rolled back',
    resourceVersion: '42',
  };
  assert.deepEqual(planFromConfigMap(planToConfigMap(stopped)), stopped);
  const nodes = { ...plan, admitted: { w1: '2026-11-26T20:10:00.000Z' } };
  assert.deepEqual(planFromConfigMap(planToConfigMap(nodes)), nodes);
  // A plan written before nodes took turns has no admitted field: nobody is admitted.
  const { admitted: _a, ...older } = planToConfigMap(plan).data!;
  assert.deepEqual(planFromConfigMap({ metadata: { name: 'kctl-upgrade-plan' }, data: older }).admitted, {});
});

test('a damaged plan names the field and what to do', () => {
  const cm = planToConfigMap(plan);
  assert.throws(
    () => planFromConfigMap({ ...cm, data: { ...cm.data, sha256: 'xyz' } }),
    /kctl-upgrade-plan: sha256 is not 64 hex digits; run kctl upgrade plan again/,
  );
  assert.throws(
    () => planFromConfigMap({ ...cm, data: { ...cm.data, maxUnavailable: '0' } }),
    /maxUnavailable is "0", not an integer >= 1/,
  );
  assert.throws(
    () => planFromConfigMap({ ...cm, data: { ...cm.data, state: 'paused' } }),
    /state is "paused", not active, done or stopped/,
  );
  assert.throws(
    () => planFromConfigMap({ ...cm, data: { ...cm.data, admitted: '["w1"]' } }),
    /admitted is not an object of node names and times/,
  );
  assert.throws(
    () => planFromConfigMap({ ...cm, data: { ...cm.data, drain: 'yes' } }),
    /drain is "yes", not true or false/,
  );
  assert.equal(planFromConfigMap({ ...cm, data: { ...cm.data, drain: 'false' } }).drain, false);
  const { size: _size, ...noSize } = cm.data!;
  assert.throws(() => planFromConfigMap({ ...cm, data: noSize }), /size is missing/);
});

test('a release string names kctl, Kubernetes and etcd, and anything else is not one', () => {
  const r = { version: '0.1.0-prev.1', kubernetes: 'v1.36.1', etcd: 'v3.6.14' };
  assert.equal(releaseString(r), '0.1.0-prev.1/v1.36.1/v3.6.14');
  assert.deepEqual(parseReleaseString(releaseString(r)), r);
  for (const bad of [undefined, '', '0.1.0', '0.1.0/v1.36.1', '0.1.0/1.36.1/v3.6.14', 'a b/v1.36.1/v3.6.14'])
    assert.equal(parseReleaseString(bad), undefined, String(bad));
});

test("a member's upgrade annotation is read when it is one, and ignored when it is not", () => {
  const u = { target: '0.2.0', state: 'downloading' as const, bytes: 1024, at: '2026-11-26T20:01:00.000Z' };
  assert.deepEqual(parseMemberUpgrade(JSON.stringify(u)), u);
  assert.equal(parseMemberUpgrade('{"target":"0.2.0","state":"sleeping","at":"x"}'), undefined);
  assert.equal(parseMemberUpgrade('not json'), undefined);
  assert.equal(parseMemberUpgrade(undefined), undefined);
});
