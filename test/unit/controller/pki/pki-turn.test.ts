// Controllers take turns renewing certificates (pki-turn.ts), against an in-memory Lease API with
// resourceVersion checks: one holds the turn while another waits; the next takes it once the first
// hands it on; a turn left by a dead controller expires; an API that does not answer never blocks a
// renewal for good.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { LeaseTurn, PKI_TURN_LEASE } from '../../../../src/controller/pki/pki-turn.ts';
import { KubeApiError, type KubeClient } from '../../../../src/kube/client.ts';
import type { Lease } from '../../../../src/kube/controller-leases.ts';
import { captureLogger } from '../../../helpers.ts';

const TIMINGS = { giveUpMs: 60_000, apiGiveUpMs: 300, retryMs: 20 };

/** One lease in memory; a write with a stale resourceVersion is a 409, as the API answers. */
function leaseApi() {
  const api = { lease: undefined as Lease | undefined, rv: 1, down: false };
  const client = {
    async request<T>(method: string, path: string, body?: unknown): Promise<T> {
      if (api.down) throw new Error('connect ECONNREFUSED');
      const named = path.endsWith(`/${PKI_TURN_LEASE}`);
      const sent = body as Lease & { preconditions?: { resourceVersion?: string } };
      const conflict = () => new KubeApiError(409, 'Conflict', 'the object has been modified');
      if (method === 'GET' && named) {
        if (!api.lease) throw new KubeApiError(404, 'NotFound', 'not found');
        return structuredClone(api.lease) as T;
      }
      if (method === 'POST') {
        if (api.lease) throw new KubeApiError(409, 'AlreadyExists', 'exists');
        api.lease = { ...sent, metadata: { ...sent.metadata, resourceVersion: String(++api.rv) } };
        return api.lease as T;
      }
      if (method === 'PUT' && named) {
        if (!api.lease || sent.metadata.resourceVersion !== api.lease.metadata.resourceVersion) throw conflict();
        api.lease = { ...sent, metadata: { ...sent.metadata, resourceVersion: String(++api.rv) } };
        return api.lease as T;
      }
      if (method === 'DELETE' && named) {
        if (sent.preconditions?.resourceVersion !== api.lease?.metadata.resourceVersion) throw conflict();
        api.lease = undefined;
        return {} as T;
      }
      throw new Error(`unexpected ${method} ${path}`);
    },
  };
  const kube: Pick<KubeClient, 'request'> = client;
  return { api, kube };
}

test('one controller holds the turn; the other waits and takes it once the first hands it on', async () => {
  const { api, kube } = leaseApi();
  const { log } = captureLogger();
  const c1 = new LeaseTurn(kube, 'kctl-controller-c1', TIMINGS);
  const c2 = new LeaseTurn(kube, 'kctl-controller-c2', TIMINGS);
  const release1 = await c1.acquire(AbortSignal.timeout(5000), log);
  assert.equal(api.lease?.spec?.holderIdentity, 'kctl-controller-c1');
  let got2 = false;
  const second = c2.acquire(AbortSignal.timeout(5000), log).then((r) => {
    got2 = true;
    return r;
  });
  await sleep(200);
  assert.equal(got2, false, 'c2 took the turn while c1 held it');
  await release1();
  const release2 = await second;
  assert.equal(api.lease?.spec?.holderIdentity, 'kctl-controller-c2');
  await release2();
  assert.equal(api.lease, undefined);
});

test('a turn left by a controller that died is taken once it expired', async () => {
  const { api, kube } = leaseApi();
  api.lease = {
    metadata: { name: PKI_TURN_LEASE, resourceVersion: '7' },
    spec: {
      holderIdentity: 'kctl-controller-gone',
      leaseDurationSeconds: 300,
      renewTime: new Date(Date.now() - 301_000).toISOString(),
    },
  };
  const release = await new LeaseTurn(kube, 'kctl-controller-c1', TIMINGS).acquire(
    AbortSignal.timeout(5000),
    captureLogger().log,
  );
  assert.equal(api.lease.spec?.holderIdentity, 'kctl-controller-c1');
  await release();
});

test('an API that does not answer never blocks a renewal: the controller renews alone after a while, and says so', async () => {
  const { api, kube } = leaseApi();
  api.down = true;
  const { log, lines } = captureLogger();
  const started = Date.now();
  const release = await new LeaseTurn(kube, 'kctl-controller-c1', TIMINGS).acquire(AbortSignal.timeout(5000), log);
  assert.ok(Date.now() - started >= TIMINGS.apiGiveUpMs);
  await release();
  assert.match(
    String(lines().find((l) => String(l.msg).startsWith('renewing without the turn'))?.msg),
    /the API did not answer \(connect ECONNREFUSED\)/,
  );
});
