import { test } from 'node:test';
import assert from 'node:assert/strict';
import { shapeProblems, type KubeletShape } from '../../../src/kube/kubelet-shape.ts';
import { KUBELET_CONFIG_SHAPE } from '../../../src/kube/gen/kubelet-config-shape.ts';
import {
  describeProblem,
  KCTL_KUBELET_FIELDS,
  kubeletValuesProblems,
  parseWorkerProfile,
  withProfile,
  workerProfilesConfigMap,
} from '../../../src/kube/worker-profiles.ts';
import { kubeletConfiguration } from '../../../src/worker/kubelet.ts';
import { workerPaths } from '../../../src/worker/paths.ts';

const said = (values: unknown) => kubeletValuesProblems(values).map(describeProblem);

test("kubelet's shape is read from its Go types: the fields kctl writes are all in it", () => {
  assert.equal(KUBELET_CONFIG_SHAPE.kind, 'object');
  const base = kubeletConfiguration({ paths: workerPaths('/d', '/r'), nodeName: 'n', nodeIp: '10.0.0.1' }, '');
  // kctl's own configuration fits kubelet's shape: a shape missing fields would fail here.
  assert.deepEqual(shapeProblems(base, KUBELET_CONFIG_SHAPE), []);
  for (const k of Object.keys(KCTL_KUBELET_FIELDS))
    assert.ok(k in (KUBELET_CONFIG_SHAPE as { fields: object }).fields, `${k} is a kubelet field`);
});

test('a profile is checked against the shape: unknown fields (with a near name), kinds, nested lists and maps', () => {
  assert.deepEqual(said({ maxPods: 10, evictionHard: { 'memory.available': '1Gi' }, imageMinimumGCAge: '2m' }), []);
  assert.deepEqual(said({ maxpods: 10 }), [
    `maxpods: kubelet's configuration has no field "maxpods" (did you mean "maxPods"?)`,
  ]);
  assert.deepEqual(said({ maxPods: '10' }), ['maxPods: expected a whole number, got "10"']);
  assert.deepEqual(said({ maxPods: 1.5 }), ['maxPods: expected a whole number, got 1.5']);
  assert.deepEqual(said({ evictionHard: { 'memory.available': 5 } }), [
    'evictionHard.memory.available: expected a string, got 5',
  ]);
  assert.deepEqual(
    said({
      registerWithTaints: [
        { key: 'a', effect: 'NoSchedule' },
        { key: 'b', efect: 'x' },
      ],
    }),
    [`registerWithTaints.[1].efect: kubelet's configuration has no field "efect"`],
  );
  assert.deepEqual(said({ featureGates: { A: 'yes' } }), ['featureGates.A: expected true or false, got "yes"']);
  assert.deepEqual(said([1]), ['(the profile): expected an object of kubelet configuration fields, got [1]']);
});

test("a profile may not set kctl's own kubelet fields; the refusal says why", () => {
  assert.deepEqual(said({ authentication: { anonymous: { enabled: true } }, readOnlyPort: 10255 }), [
    "authentication: set by kctl (kctl keeps kubelet's API authenticated by the cluster); remove it from the profile",
    "readOnlyPort: set by kctl (kctl keeps kubelet's API authenticated (no read-only port)); remove it from the profile",
  ]);
});

test('the profiles ConfigMap reads back per profile; a damaged one is refused naming the profile', () => {
  const cm = workerProfilesConfigMap({ small: { maxPods: 17 }, default: {} });
  assert.deepEqual(parseWorkerProfile(cm.data, 'small'), { maxPods: 17 });
  assert.deepEqual(parseWorkerProfile(cm.data, 'default'), {});
  assert.equal(parseWorkerProfile(cm.data, 'big'), undefined);
  assert.equal(parseWorkerProfile(undefined, 'small'), undefined);
  assert.throws(() => parseWorkerProfile({ small: '{' }, 'small'), /profile small is not JSON/);
  assert.throws(
    () => parseWorkerProfile({ small: '{"cgroupRoot":"/x"}' }, 'small'),
    /profile small: cgroupRoot: set by kctl/,
  );
});

test("a profile lies over kctl's configuration: objects merge key by key, anything else replaces", () => {
  const base = { maxPods: 110, evictionHard: { a: '1', b: '2' }, taints: [{ k: 1 }], x: { y: { z: 1, w: 2 } } };
  assert.deepEqual(withProfile(base, { maxPods: 17, evictionHard: { a: '9' }, taints: [], x: { y: { z: 3 } } }), {
    maxPods: 17,
    evictionHard: { a: '9', b: '2' },
    taints: [],
    x: { y: { z: 3, w: 2 } },
  });
  assert.equal(withProfile(base, undefined), base);
  assert.deepEqual(base.evictionHard, { a: '1', b: '2' }, 'the base is not changed');
});

test('shapes: scalars take strings or numbers, any takes anything, a bounded number of problems', () => {
  const shape: KubeletShape = {
    kind: 'object',
    fields: { d: { kind: 'scalar' }, a: { kind: 'any' }, n: { kind: 'number' } },
  };
  assert.deepEqual(shapeProblems({ d: '10s', a: { q: [1] }, n: 0.5 }, shape), []);
  assert.deepEqual(shapeProblems({ d: 10 }, shape), []);
  assert.equal(
    shapeProblems({ d: true }, shape)[0]?.message,
    'expected a string or a number (such as 10s or 100Mi), got true',
  );
  const many = Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`f${i}`, 1]));
  assert.equal(shapeProblems(many, shape).length, 10);
});
