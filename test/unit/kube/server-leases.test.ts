// Which konnectivity-server leases count (upstream proxy-agent's IsLeaseValid).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inClusterCredentials, leaseIsValid } from '../../../src/kube/server-leases.ts';

const at = Date.parse('2026-11-24T12:00:00Z');
const lease = (spec: object) => ({ metadata: { name: 'l' }, spec });

test('a lease counts while its renew (else acquire) time plus its duration lies ahead', () => {
  assert.equal(leaseIsValid(lease({ renewTime: '2026-11-24T11:59:30.000000Z', leaseDurationSeconds: 40 }), at), true);
  assert.equal(leaseIsValid(lease({ renewTime: '2026-11-24T11:59:00.000000Z', leaseDurationSeconds: 40 }), at), false);
  assert.equal(leaseIsValid(lease({ acquireTime: '2026-11-24T11:59:30.000000Z', leaseDurationSeconds: 40 }), at), true);
  // renewTime wins over acquireTime.
  assert.equal(
    leaseIsValid(
      lease({
        acquireTime: '2026-11-24T11:59:50.000000Z',
        renewTime: '2026-11-24T11:00:00.000000Z',
        leaseDurationSeconds: 40,
      }),
      at,
    ),
    false,
  );
  assert.equal(leaseIsValid(lease({ leaseDurationSeconds: 40 }), at), false, 'neither time: expired');
});

test('in-cluster credentials need the service environment, with a line saying what to pass instead', () => {
  assert.throws(() => inClusterCredentials({}), /not running in a pod .*; pass --kubeconfig/);
});
