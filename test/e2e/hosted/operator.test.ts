// The operator (`kctl operator manifests`: two replicas of the kctl image running `kctl operator
// run` with its own service account and RBAC, one leading) on a kctl management cluster: a
// KctlCluster object becomes a hosted api-only control plane: its database and role on the
// PostgreSQL its datastore Secret names, its CAs in a Secret made once, a Deployment of the kctl
// image, a NodePort Service, an admin kubeconfig Secret, and a status that says Ready with its
// endpoint. An admin on another host uses that kubeconfig (kept tenant credentials are in
// upgrade/hosted-lab.test.ts).
// The CA Secret deleted: the cluster is reported Degraded and no new CA is made; put back, it is
// Ready again. The object deleted: its pods go, then its database and role, then the object and
// everything else it owned.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { stringify } from 'yaml';
import { KCTL_VERSION } from '../../../src/base/version.ts';
import { kctl } from '../lab/kctl.ts';
import { hostedKubectl, startManagementLab } from '../lab/management.ts';
import { waitFor } from '../../wait.ts';

const NODE_PORT = 30644;

test('the operator, as a Deployment with a leader, makes a KctlCluster a hosted control plane with its status, keeps its CA, and removes what it owns when it is deleted', async (t) => {
  const m = await startManagementLab(t, 'hop', { dir: 'kctl-operator-', pgPort: 15433 });
  const { c, mw, pg } = m;

  const crd = await kctl(['operator', 'crd']);
  assert.equal((await c.kubectl(['apply', '-f', '-'], String(crd.stdout))).exitCode, 0);
  await c.kubectl(['wait', '--for=condition=Established', 'crd/kctlclusters.kctl.dev', '--timeout=60s']);
  const manifests = await kctl(['operator', 'manifests']);
  assert.equal((await c.kubectl(['apply', '-f', '-'], String(manifests.stdout))).exitCode, 0);
  const operatorLog = async () =>
    String(
      (await c.kubectl(['logs', '-n', 'kctl-system', '-l', 'app.kubernetes.io/name=kctl-operator', '--tail=15']))
        .stdout,
    );
  const operatorPods = async () =>
    String((await c.kubectl(['get', 'pod', '-n', 'kctl-system', '-o', 'jsonpath={.items[*].metadata.name}'])).stdout)
      .split(' ')
      .filter(Boolean);
  await waitFor(
    'both operator pods ready',
    180_000,
    async () =>
      String(
        (
          await c.kubectl([
            'get',
            'deploy',
            '-n',
            'kctl-system',
            'kctl-operator',
            '-o',
            'jsonpath={.status.readyReplicas}',
          ])
        ).stdout,
      ) === '2',
    operatorLog,
  );
  // One of them leads (the Lease names it); the other waits.
  const holder = await waitFor('an operator pod holds the Lease', 60_000, async () => {
    const r = await c.kubectl([
      'get',
      'lease',
      '-n',
      'kube-system',
      'kctl-operator',
      '-o',
      'jsonpath={.spec.holderIdentity}',
    ]);
    return String(r.stdout);
  });
  assert.ok(
    (await operatorPods()).some((p) => holder.startsWith(`${p}-`)),
    `${holder} is none of the operator pods`,
  );

  // The operator's datastore role may make databases and roles, and is no superuser (as on a managed PostgreSQL).
  await pg.sql('create role kctl_admin login createdb createrole');
  await pg.sql('create role intruder login');
  const admin = `postgres://kctl_admin@${pg.host}:${pg.port}/postgres?sslmode=disable`;
  assert.equal(
    (await c.kubectl(['create', 'secret', 'generic', 'pg-admin', `--from-literal=dataSource=${admin}`])).exitCode,
    0,
  );
  const object = stringify({
    apiVersion: 'kctl.dev/v1alpha1',
    kind: 'KctlCluster',
    metadata: { name: 't1' },
    spec: {
      version: KCTL_VERSION,
      config: { profile: 'api-only' },
      datastore: { postgres: { secretName: 'pg-admin' } },
      exposure: { type: 'NodePort', nodePort: NODE_PORT },
    },
  });
  assert.equal((await c.kubectl(['apply', '-f', '-'], object)).exitCode, 0);
  const status = async () =>
    JSON.parse(String((await c.kubectl(['get', 'kc', 't1', '-o', 'jsonpath={.status}'])).stdout) || '{}') as {
      conditions?: { type: string; status: string; reason: string; message: string }[];
      endpoint?: string;
      version?: string;
      kubeconfigSecret?: string;
      caNotAfter?: string;
    };
  const ready = async (want: string) => (await status()).conditions?.find((x) => x.type === 'Ready')?.status === want;
  const started = Date.now();
  await waitFor(
    'the KctlCluster is Ready',
    300_000,
    () => ready('True'),
    async () => JSON.stringify(await status()) + (await operatorLog()),
  );
  t.diagnostic(`KctlCluster Ready ${((Date.now() - started) / 1000).toFixed(1)} s after apply`);
  const s = await status();
  assert.equal(s.endpoint, `https://${mw.ip}:${NODE_PORT}`);
  assert.equal(s.version, KCTL_VERSION);
  assert.equal(s.kubeconfigSecret, 't1-admin-kubeconfig');
  assert.ok(s.caNotAfter && new Date(s.caNotAfter).getTime() > Date.now());
  const listed = String((await c.kubectl(['get', 'kc'])).stdout);
  assert.match(listed, new RegExp(`t1\\s+True\\s+api-only\\s+${KCTL_VERSION.replace(/\./g, '\\.')}\\s+https://`));
  // Its own database and role, made by the operator: the role owns the database, no other role may
  // connect to it, and the pod's config names that role, not the datastore Secret's.
  const database = (await pg.sql("select datname from pg_database where datname like 'kctl_default_t1_%'")).trim();
  assert.match(database, /^kctl_default_t1_[0-9a-f]{8}$/);
  assert.equal(
    (await pg.sql(`select pg_get_userbyid(datdba) from pg_database where datname = '${database}'`)).trim(),
    database,
  );
  assert.equal((await pg.sql(`select has_database_privilege('intruder', '${database}', 'connect')`)).trim(), 'f');
  const config = await c.kubectl(['get', 'secret', 't1-config', '-o', 'jsonpath={.data.kctl\\.yaml}']);
  const dataSource = /dataSource: (\S+)/.exec(Buffer.from(String(config.stdout), 'base64').toString())?.[1];
  assert.equal(new URL(dataSource!).username, database);

  // An admin elsewhere, with the kubeconfig the operator keeps.
  const hosted = await hostedKubectl(m, 't1');
  const made = await hosted(['create', 'configmap', 'hello', '--from-literal=where=operator']);
  assert.equal(made.exitCode, 0, String(made.stderr));

  // The CA Secret deleted: reported, never made again.
  const pki = await c.kubectl(['get', 'secret', 't1-pki', '-o', 'json']);
  const caBefore = (JSON.parse(String(pki.stdout)) as { data: Record<string, string> }).data['ca.crt'];
  assert.equal((await c.kubectl(['delete', 'secret', 't1-pki'])).exitCode, 0);
  await waitFor(
    'the KctlCluster says its CA Secret is gone',
    60_000,
    async () => (await status()).conditions?.some((x) => x.type === 'Degraded' && x.reason === 'PkiSecretMissing'),
    async () => JSON.stringify(await status()) + (await operatorLog()),
  );
  assert.notEqual((await c.kubectl(['get', 'secret', 't1-pki'])).exitCode, 0, 'a new CA Secret was made');
  // Put back (as from a backup), the cluster is well again, with the same CA.
  const restored = JSON.parse(String(pki.stdout)) as { metadata: Record<string, unknown> };
  restored.metadata = { name: 't1-pki', namespace: 'default', ownerReferences: restored.metadata.ownerReferences };
  assert.equal((await c.kubectl(['apply', '-f', '-'], JSON.stringify(restored))).exitCode, 0);
  await waitFor('Ready again', 120_000, async () => {
    const x = await status();
    return x.conditions?.some((y) => y.type === 'Degraded' && y.status === 'False') && (await ready('True'));
  });
  const after = await c.kubectl(['get', 'secret', 't1-pki', '-o', 'jsonpath={.data.ca\\.crt}']);
  assert.equal(String(after.stdout), caBefore);
  const read = await hosted(['get', 'configmap', 'hello', '-o', 'jsonpath={.data.where}']);
  assert.equal(String(read.stdout), 'operator', String(read.stderr));

  // Deleted: its pods first, then its database, then the object and its Service, ConfigMap and
  // Secrets (the operator's finalizer holds the object until the database is dropped).
  const finalizers = await c.kubectl(['get', 'kc', 't1', '-o', 'jsonpath={.metadata.finalizers}']);
  assert.match(String(finalizers.stdout), /kctl\.dev\/database/);
  assert.equal((await c.kubectl(['delete', 'kc', 't1', '--wait=false'])).exitCode, 0);
  await waitFor('t1 and what it owned are gone', 180_000, async () => {
    const left = await c.kubectl(['get', 'kc,deploy,pod,svc,cm,secret', '-l', 'kctl.dev/cluster=t1', '-o', 'name']);
    const object = await c.kubectl(['get', 'kc', 't1', '-o', 'name']);
    return left.exitCode === 0 && String(left.stdout).trim() === '' && object.exitCode !== 0;
  });
  assert.equal(
    (await pg.sql("select datname from pg_database where datname like 'kctl_default_t1_%'")).trim(),
    '',
    'the database of t1 is still there',
  );
  assert.equal(
    (await pg.sql(`select rolname from pg_roles where rolname = '${database}'`)).trim(),
    '',
    'its role is still there',
  );
});
