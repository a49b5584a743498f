// The nodes' turns in an upgrade plan: who goes next, who is done, who gives up the turn, and
// when the plan stops or is done (controller/upgrades/upgrade-nodes.ts's nodeStep, decisions only).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  drainable,
  nodeStep,
  nodeView,
  SILENCE_SLACK_S,
  type NodeView,
} from '../../../../src/controller/upgrades/upgrade-nodes.ts';
import type { UpgradePlan } from '../../../../src/kube/upgrade-plan.ts';

const OLD = { version: '0.1.0', kubernetes: 'v1.36.1', etcd: 'v3.6.14' };
const NEW = { version: '0.2.0', kubernetes: 'v1.36.3', etcd: 'v3.6.14' };
const NOW = Date.parse('2026-11-27T10:00:00.000Z');
const ago = (s: number) => new Date(NOW - s * 1000).toISOString();

const plan = (over: Partial<UpgradePlan> = {}): UpgradePlan => ({
  target: { ...NEW, sha256: 'a'.repeat(64), size: 1000 },
  created: ago(600),
  drain: true,
  drainTimeoutS: 300,
  maxUnavailable: 1,
  readyTimeoutS: 300,
  state: 'active',
  controllers: ['c1'],
  admitted: {},
  ...over,
});

const node = (name: string, over: Partial<NodeView> = {}): NodeView => ({ name, ready: true, release: OLD, ...over });

test('with drain, the first pending node (by name) is cordoned and drained; at most maxUnavailable at once', () => {
  const s = nodeStep(plan(), [node('w2'), node('w1'), node('w3')], NOW);
  assert.deepEqual(s.startDrain, ['w1']);
  assert.deepEqual(s.admit, []);
  assert.equal(s.done, false);
  const two = nodeStep(plan({ maxUnavailable: 2 }), [node('w2'), node('w1'), node('w3')], NOW);
  assert.deepEqual(two.startDrain, ['w1', 'w2']);
  // A node being drained holds a slot, and stays in the drain.
  const draining = nodeStep(plan(), [node('w1', { cordon: { since: ago(10), cordoned: true } }), node('w2')], NOW);
  assert.deepEqual(draining.draining, ['w1']);
  assert.deepEqual(draining.startDrain, []);
});

test('without drain, the next node is admitted at once; an admitted node holds its slot', () => {
  assert.deepEqual(nodeStep(plan({ drain: false }), [node('w1'), node('w2')], NOW).admit, ['w1']);
  const busy = nodeStep(plan({ drain: false, admitted: { w1: ago(30) } }), [node('w1'), node('w2')], NOW);
  assert.deepEqual(busy.admit, []);
  assert.deepEqual(busy.release, []);
});

test('a node that reports done at the target and is Ready ends its turn, is uncordoned, and the next one goes', () => {
  const w1 = node('w1', {
    release: NEW,
    upgrade: { target: NEW.version, state: 'done', at: ago(5) },
    cordon: { since: ago(100), cordoned: true },
  });
  const s = nodeStep(plan({ admitted: { w1: ago(60) } }), [w1, node('w2')], NOW);
  assert.deepEqual(
    s.release.map((r) => r.node),
    ['w1'],
  );
  assert.deepEqual(s.uncordon, ['w1']);
  assert.deepEqual(s.startDrain, ['w2']);
  // Done but not Ready yet: it keeps its turn.
  const notReady = nodeStep(plan({ admitted: { w1: ago(60) } }), [{ ...w1, ready: false }, node('w2')], NOW);
  assert.deepEqual(notReady.release, []);
  assert.deepEqual(notReady.startDrain, []);
});

test('a node that rolled back stops the plan with its reason', () => {
  const w1 = node('w1', {
    upgrade: { target: NEW.version, state: 'rolled back', reason: 'not Ready within 300 s', at: ago(5) },
  });
  const s = nodeStep(plan({ admitted: { w1: ago(400) } }), [w1, node('w2')], NOW);
  assert.equal(s.stop, 'node w1: not Ready within 300 s');
  assert.deepEqual(s.startDrain, []);
  // A rollback reported for an earlier target is not this plan's.
  const old = node('w1', { upgrade: { target: '0.1.5', state: 'rolled back', reason: 'x', at: ago(5) } });
  assert.equal(nodeStep(plan({ admitted: { w1: ago(10) } }), [old], NOW).stop, undefined);
});

test('an admitted node silent past the ready timeout gives its turn up; a downloading one that reports keeps it', () => {
  const silentFor = 300 + SILENCE_SLACK_S + 1;
  const silent = nodeStep(plan({ admitted: { w1: ago(silentFor) } }), [node('w1'), node('w2')], NOW);
  assert.deepEqual(
    silent.release.map((r) => r.node),
    ['w1'],
  );
  assert.match(silent.release[0]!.why, /no word from it for \d+ s/);
  // The next node takes the turn; w1 is pending again from the next pass on.
  assert.deepEqual(silent.startDrain, ['w2']);
  const talking = node('w1', { upgrade: { target: NEW.version, state: 'downloading', bytes: 10, at: ago(5) } });
  assert.deepEqual(nodeStep(plan({ admitted: { w1: ago(silentFor) } }), [talking, node('w2')], NOW).release, []);
  // A node deleted while admitted frees its slot.
  assert.deepEqual(
    nodeStep(plan({ admitted: { gone: ago(5) } }), [node('w2')], NOW).release.map((r) => r.why),
    ['the node is gone'],
  );
});

test('NotReady nodes and nodes that do not name a release wait; the plan is done only when every node runs the target', () => {
  const s = nodeStep(plan(), [node('w1', { ready: false }), node('w2', { release: undefined })], NOW);
  assert.deepEqual(s.startDrain, []);
  assert.equal(s.done, false);
  const all = nodeStep(plan(), [node('w1', { release: NEW }), node('w2', { release: NEW })], NOW);
  assert.equal(all.done, true);
  // A cordon left behind on a node at the target is lifted, and does not hold the plan open.
  const left = nodeStep(plan(), [node('w1', { release: NEW, cordon: { since: ago(50), cordoned: false } })], NOW);
  assert.deepEqual(left.uncordon, ['w1']);
  assert.equal(left.done, true);
});

test('a Node object reads into its view; drains move pods a controller makes again (and wait until they are gone), not DaemonSet pods, pods of no controller or finished ones', () => {
  const v = nodeView({
    metadata: {
      name: 'w1',
      annotations: {
        'kctl.dev/version': '0.1.0/v1.36.1/v3.6.14',
        'kctl.dev/upgrade': JSON.stringify({ target: '0.2.0', state: 'downloading', bytes: 5, at: ago(1) }),
        'kctl.dev/upgrade-cordoned': JSON.stringify({ since: ago(9), cordoned: true }),
      },
    },
    status: { conditions: [{ type: 'Ready', status: 'True' }] },
  });
  assert.deepEqual(v, {
    name: 'w1',
    ready: true,
    release: OLD,
    upgrade: { target: '0.2.0', state: 'downloading', bytes: 5, at: ago(1) },
    cordon: { since: ago(9), cordoned: true },
  });
  const rs = [{ kind: 'ReplicaSet', controller: true }];
  const pod = (over: object, phase = 'Running') => ({
    metadata: { name: 'p', namespace: 'n', ownerReferences: rs, ...over },
    status: { phase },
  });
  assert.equal(drainable(pod({})), true);
  assert.equal(drainable(pod({ ownerReferences: [{ kind: 'DaemonSet', controller: true }] })), false);
  assert.equal(drainable(pod({ ownerReferences: undefined })), false);
  assert.equal(drainable(pod({ ownerReferences: [{ kind: 'ReplicaSet' }] })), false);
  // Going, but not gone: the drain waits for it.
  assert.equal(drainable(pod({ deletionTimestamp: ago(1) })), true);
  assert.equal(drainable(pod({}, 'Succeeded')), false);
});
