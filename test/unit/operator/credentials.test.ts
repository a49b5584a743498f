// Kept credentials of tenant service accounts: a token is asked for when there is none, a third
// of its lifetime is left, or its anchor in the tenant is not the one it was bound to; never written
// over a Secret that is not the cluster's or one the cluster itself uses; an entry taken out of the
// spec loses its anchor in the tenant (its token is refused from then on), then its Secret. The real hosted API is
// in test/e2e/hosted/operator.test.ts; here both APIs are small fakes.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parse } from 'yaml';
import { KubeClient } from '../../../src/kube/client.ts';
import { keepCredentials, needsRenewal, TOKEN_LIFETIME_S } from '../../../src/operator/credentials.ts';
import type { KctlCluster } from '../../../src/operator/objects.ts';
import { fakeApiServer, json } from '../kube/fake-apiserver.ts';

const now = new Date('2026-11-30T12:00:00Z');
const hours = (h: number) => new Date(now.getTime() + h * 3600_000).toISOString();

test('a token is renewed once a third of its lifetime is left, or when its expiry is unknown', () => {
  assert.equal(TOKEN_LIFETIME_S, 24 * 3600);
  assert.equal(needsRenewal(hours(20), now), false);
  assert.equal(needsRenewal(hours(8.5), now), false);
  assert.equal(needsRenewal(hours(7.5), now), true);
  assert.equal(needsRenewal(hours(-1), now), true);
  assert.equal(needsRenewal(undefined, now), true);
  assert.equal(needsRenewal('not a date', now), true);
});

type Obj = { metadata: Record<string, unknown>; data?: Record<string, string> };
type T = Parameters<typeof fakeApiServer>[0];

/** The management cluster's Secrets in one namespace, with what was done to them. */
async function management(t: T, secrets: Record<string, Obj>) {
  const calls: string[] = [];
  const api = await fakeApiServer(t, (req, res) => {
    const name = req.path.split('/').at(-1)!;
    if (req.method === 'GET' && name === 'secrets')
      return json(res, 200, { items: Object.values(secrets).filter((s) => s.metadata.labels !== undefined) });
    if (req.method === 'GET')
      return secrets[name] ? json(res, 200, secrets[name]) : json(res, 404, { reason: 'NotFound', message: 'no' });
    calls.push(`${req.method} ${name}`);
    if (req.method === 'DELETE') delete secrets[name];
    else secrets[name] = parse(req.body) as Obj;
    json(res, 200, secrets[name] ?? {});
  });
  return { kube: new KubeClient({ server: api.url }), calls };
}

/**
 * The hosted API: every account exists; `anchors` are the tenant's anchor Secrets (name -> uid);
 * a token request is answered with tok-1 for 24 h.
 */
async function tenant(t: T, anchors: Record<string, string>) {
  const asked: string[] = [];
  let made = 0;
  const api = await fakeApiServer(t, (req, res) => {
    const name = req.path.split('/').at(-1)!;
    if (req.method === 'GET' && req.path.includes('/secrets/'))
      return anchors[name]
        ? json(res, 200, { metadata: { name, uid: anchors[name] } })
        : json(res, 404, { reason: 'NotFound', message: 'no' });
    if (req.method === 'GET') return json(res, 200, {});
    if (req.method === 'DELETE') {
      asked.push(`DELETE ${name}`);
      delete anchors[name];
      return json(res, 200, {});
    }
    const body = JSON.parse(req.body) as {
      metadata?: { name: string };
      spec?: { boundObjectRef?: { name: string; uid: string } };
    };
    if (name === 'secrets') {
      const uid = `made-${++made}`;
      anchors[body.metadata!.name] = uid;
      asked.push(`POST anchor ${body.metadata!.name}`);
      return json(res, 201, { metadata: { name: body.metadata!.name, uid } });
    }
    const ref = body.spec?.boundObjectRef;
    asked.push(`POST token bound to ${ref?.name}/${ref?.uid}`);
    json(res, 201, { status: { token: 'tok-1', expirationTimestamp: hours(24) } });
  });
  return { hosted: { client: new KubeClient({ server: api.url }), caPem: 'CA' }, asked };
}

const cluster = (serviceAccounts: KctlCluster['spec']['serviceAccounts']): KctlCluster => ({
  apiVersion: 'kctl.dev/v1alpha1',
  kind: 'KctlCluster',
  metadata: { name: 't1', namespace: 'team', uid: 'u-1' },
  spec: { version: '0.3.0', serviceAccounts },
});
const owned = (name: string, expires: string, anchorUid = `a-${name}`) => ({
  metadata: {
    name,
    labels: { 'kctl.dev/credentials-of': 't1' },
    annotations: { 'kctl.dev/expires': expires, 'kctl.dev/bound-to': `apps/kctl-kept-${name}/${anchorUid}` },
    ownerReferences: [{ uid: 'u-1' }],
  },
});
const apply = { fieldManager: 'test', force: true };

test('kept credentials: made bound to an anchor, renewed when due or when the anchor changed, never over a foreign or own Secret, removed with their anchor', async (t) => {
  const secrets: Record<string, Obj> = {
    fresh: owned('fresh', hours(20)),
    due: owned('due', hours(2)),
    // Its anchor was deleted and made again in the tenant: the token it holds is refused.
    rebound: owned('rebound', hours(20), 'a-old'),
    gone: owned('gone', hours(20)),
    foreign: { metadata: { name: 'foreign', ownerReferences: [{ uid: 'someone-else' }] } },
  };
  const anchors: Record<string, string> = {
    'kctl-kept-fresh': 'a-fresh',
    'kctl-kept-due': 'a-due',
    'kctl-kept-rebound': 'a-new',
    'kctl-kept-gone': 'a-gone',
  };
  const { kube, calls } = await management(t, secrets);
  const { hosted, asked } = await tenant(t, anchors);
  const c = cluster([
    { namespace: 'apps', name: 'watcher', secretName: 'new' },
    { namespace: 'apps', name: 'watcher', secretName: 'fresh' },
    { namespace: 'apps', name: 'watcher', secretName: 'due' },
    { namespace: 'apps', name: 'watcher', secretName: 'rebound' },
    { namespace: 'apps', name: 'watcher', secretName: 'foreign' },
    { namespace: 'apps', name: 'watcher', secretName: 't1-pki' },
  ]);
  const failed = await keepCredentials(kube, hosted, c, apply, now);
  assert.deepEqual(failed, [
    "apps/watcher: Secret foreign exists and is not this cluster's; name another",
    'apps/watcher: Secret t1-pki is one the cluster itself uses; name another',
  ]);
  assert.deepEqual(calls, ['PATCH new', 'PATCH due', 'PATCH rebound', 'DELETE gone']);
  assert.deepEqual(asked, [
    'POST anchor kctl-kept-new',
    'POST token bound to kctl-kept-new/made-1',
    'POST token bound to kctl-kept-due/a-due',
    'POST token bound to kctl-kept-rebound/a-new',
    // The anchor goes before the Secret: from then on kube-apiserver refuses the token.
    'DELETE kctl-kept-gone',
  ]);
  assert.equal(anchors['kctl-kept-gone'], undefined);
  const made = secrets.new!;
  const kubeconfig = parse(Buffer.from(made.data!.kubeconfig!, 'base64').toString()) as {
    clusters: { cluster: { server: string } }[];
    users: { user: { token: string } }[];
  };
  assert.equal(kubeconfig.clusters[0]!.cluster.server, 'https://t1.team.svc:6443');
  assert.equal(kubeconfig.users[0]!.user.token, 'tok-1');
  const annotations = made.metadata.annotations as Record<string, string>;
  assert.equal(annotations['kctl.dev/expires'], hours(24));
  assert.equal(annotations['kctl.dev/bound-to'], 'apps/kctl-kept-new/made-1');
  assert.equal((made.metadata.labels as Record<string, string>)['kctl.dev/credentials-of'], 't1');
  assert.equal(
    (secrets.rebound!.metadata.annotations as Record<string, string>)['kctl.dev/bound-to'],
    'apps/kctl-kept-rebound/a-new',
  );

  // Nothing due and nothing changed: a second pass asks the tenant for no token.
  asked.length = 0;
  calls.length = 0;
  assert.equal((await keepCredentials(kube, hosted, c, apply, now)).length, 2);
  assert.deepEqual([...asked, ...calls], []);
});
