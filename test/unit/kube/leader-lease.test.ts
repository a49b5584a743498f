import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LeaderLease } from '../../../src/kube/leader-lease.ts';
import { fakeLeaseApi as leaseApi } from './fake-apiserver.ts';

test('one holder: the first takes the lease, the other waits until it has not changed for its whole duration', async (t) => {
  const { kube, stored } = await leaseApi(t);
  let now = 1_000_000;
  const a = new LeaderLease(kube, 'kctl-backup', 'a', () => now);
  const b = new LeaderLease(kube, 'kctl-backup', 'b', () => now);
  assert.equal(await a.tryAcquireOrRenew({ 'kctl.dev/x': '1' }), true);
  assert.equal(await b.tryAcquireOrRenew(), false);
  assert.equal(b.holder(), 'a');
  assert.equal(b.annotations()['kctl.dev/x'], '1');
  now += 10_000;
  assert.equal(await a.tryAcquireOrRenew(), true, 'the holder renews');
  assert.equal(await b.tryAcquireOrRenew(), false);
  // a stops renewing: b must see the same record for 30 s of its own clock.
  now += 29_000;
  assert.equal(await b.tryAcquireOrRenew(), false);
  assert.equal(a.holding(), false, 'a no longer believes it holds a lease it has not renewed for 29 s');
  now += 1_000;
  assert.equal(await b.tryAcquireOrRenew(), true);
  assert.equal(stored()?.spec?.holderIdentity, 'b');
  assert.equal(await a.tryAcquireOrRenew(), false, 'the old holder sees the new one');
});

test('two racing for a free lease: one wins (the write with a stale resourceVersion conflicts)', async (t) => {
  const { kube } = await leaseApi(t);
  const a = new LeaderLease(kube, 'kctl-backup', 'a');
  const b = new LeaderLease(kube, 'kctl-backup', 'b');
  const won = await Promise.all([a.tryAcquireOrRenew(), b.tryAcquireOrRenew()]);
  assert.equal(won.filter(Boolean).length, 1, JSON.stringify(won));
});

test('a holder that cannot reach the API stops believing it holds the lease before anyone else may take it', async (t) => {
  const { kube, state } = await leaseApi(t);
  let now = 1_000_000;
  const a = new LeaderLease(kube, 'kctl-backup', 'a', () => now);
  assert.equal(await a.tryAcquireOrRenew(), true);
  state.down = true;
  now += 10_000;
  await assert.rejects(a.tryAcquireOrRenew(), /503/);
  assert.equal(a.holding(), true, 'still within the lease');
  now += 15_000;
  assert.equal(a.holding(), false, 'held until 5 s before the lease runs out for the others');
});

test('release gives the lease up at once, so another takes it without waiting', async (t) => {
  const { kube } = await leaseApi(t);
  const a = new LeaderLease(kube, 'kctl-backup', 'a');
  const b = new LeaderLease(kube, 'kctl-backup', 'b');
  assert.equal(await a.tryAcquireOrRenew(), true);
  await a.release();
  assert.equal(a.holding(), false);
  assert.equal(await b.tryAcquireOrRenew(), true);
});
