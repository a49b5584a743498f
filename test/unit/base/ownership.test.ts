// Who may be routed a pod range (base/ownership.ts judgePodRanges): only a range of the
// allocator's shape, held by one node. The lies a node could write into its own spec (a /25 or a
// /32 inside another node's /24, 0.0.0.0/0) are nobody's and take nothing from the honest node.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { judgePodRanges } from '../../../src/base/ownership.ts';

const space = { podCIDRs: ['10.244.0.0/16'], podRangeBits: 24 };
const honest = { name: 'w1', podCIDRs: ['10.244.0.0/24'] };

test("a self-declared range inside another node's is refused, and the honest node keeps its own", () => {
  for (const [lie, why] of [
    ['10.244.0.0/25', 'a /25, not the /24 kube-controller-manager gives each node'],
    ['10.244.0.5/32', 'a /32, not the /24 kube-controller-manager gives each node'],
    ['0.0.0.0/0', "outside the cluster's pod CIDR 10.244.0.0/16"],
    ['192.168.7.0/24', "outside the cluster's pod CIDR 10.244.0.0/16"],
    ['10.244.0.9/24', 'not a network in CIDR form'],
    ['10.244.300.0/24', 'not a network in CIDR form'],
  ] as const) {
    const v = judgePodRanges([honest, { name: 'evil', podCIDRs: [lie] }], space);
    assert.deepEqual(v.ranges.get('w1'), ['10.244.0.0/24'], lie);
    assert.equal(v.ranges.has('evil'), false, lie);
    assert.deepEqual(v.refused, [{ node: 'evil', range: lie, reason: why }]);
  }
});

test("one range held by two nodes is nobody's; either alone keeps it", () => {
  const v = judgePodRanges(
    [honest, { name: 'evil', podCIDRs: ['10.244.0.0/24'] }, { name: 'w2', podCIDRs: ['10.244.1.0/24'] }],
    space,
  );
  assert.equal(v.ranges.has('w1'), false);
  assert.equal(v.ranges.has('evil'), false);
  assert.deepEqual(v.ranges.get('w2'), ['10.244.1.0/24']);
  assert.deepEqual(v.refused.map((r) => `${r.node}: ${r.reason}`).sort(), [
    "evil: overlaps node w1's 10.244.0.0/24 (nobody's until an admin resolves it)",
    "w1: overlaps node evil's 10.244.0.0/24 (nobody's until an admin resolves it)",
  ]);
  assert.deepEqual(judgePodRanges([honest, { name: 'evil' }], space).ranges.get('w1'), ['10.244.0.0/24']);
});

test('without the cluster shape only overlaps count, in any order and either family', () => {
  const v = judgePodRanges([
    { name: 'a', podCIDRs: ['10.1.0.0/16'] },
    { name: 'b', podCIDRs: ['10.2.0.0/24', 'fd00:1::/64'] },
    { name: 'c', podCIDRs: ['10.1.200.0/25'] },
    { name: 'd', podCIDRs: ['fd00:2::/64'] },
  ]);
  assert.deepEqual([...v.ranges.keys()].sort(), ['b', 'd']);
  assert.deepEqual(v.ranges.get('b'), ['10.2.0.0/24', 'fd00:1::/64']);
  assert.deepEqual(v.refused.map((r) => r.node).sort(), ['a', 'c']);
  // Two ranges of one node never conflict with each other.
  assert.deepEqual(judgePodRanges([{ name: 'a', podCIDRs: ['10.1.0.0/24', '10.1.0.0/24'] }]).ranges.get('a'), [
    '10.1.0.0/24',
  ]);
});

test('a cluster whose allocator gives another size judges by that size', () => {
  const v = judgePodRanges(
    [
      { name: 'a', podCIDRs: ['10.244.0.0/26'] },
      { name: 'b', podCIDRs: ['10.244.1.0/24'] },
    ],
    { ...space, podRangeBits: 26 },
  );
  assert.deepEqual(v.ranges.get('a'), ['10.244.0.0/26']);
  assert.match(v.refused[0]?.reason ?? '', /a \/24, not the \/26/);
});

test("a wildcard name is nobody's, even when a Node reports it and nothing is reserved", async () => {
  const { ownershipProblem } = await import('../../../src/base/ownership.ts');
  const w2 = { name: 'w2', addresses: [{ type: 'Hostname', address: '*.site.example' }] };
  const directory = { synced: true, get: () => w2, owners: () => ['w2'], onChange: () => () => undefined };
  assert.equal(ownershipProblem('w2', w2, '*.site.example', true, directory), 'a wildcard name');
  assert.equal(ownershipProblem('w2', w2, 'w2', true, directory), undefined);
});
