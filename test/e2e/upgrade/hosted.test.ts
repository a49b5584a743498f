// A hosted cluster upgraded by its object: a KctlCluster made with the previous test build's
// version (its image beside this kctl's on the management workers) runs that kctl and its
// Kubernetes; spec.version set to this kctl's rolls the control plane to the new image, with the
// same CA and data, and the status says the new version once every pod runs it. Going back is
// refused with the reason, and the pods are left as they were.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { stringify } from 'yaml';
import { KCTL_VERSION } from '../../../src/base/version.ts';
import { kctlImageOf } from '../../../src/payload/images.ts';
import { track } from '../lab/cluster.ts';
import { kctl, requirePreviousKctl } from '../lab/kctl.ts';
import { startManagementLab } from '../lab/management.ts';
import { waitFor } from '../../wait.ts';

const NODE_PORT = 30645;

test('a hosted cluster is upgraded by changing its version: the control plane rolls to the new image with its CA and data, and a downgrade is refused', async (t) => {
  const previous = requirePreviousKctl();
  const { dir, kctlBin, c, mc, out, pg } = await startManagementLab(t, 'hup', {
    dir: 'kctl-hosted-upgrade-',
    pgPort: 15435,
    kctls: [previous],
  });
  const adminConf = join(c.dataDir, 'pki', 'admin.conf');
  const crd = await kctl(['operator', 'crd']);
  assert.equal((await c.kubectl(['apply', '-f', '-'], String(crd.stdout))).exitCode, 0);
  await c.kubectl(['wait', '--for=condition=Established', 'crd/kctlclusters.kctl.dev', '--timeout=60s']);
  const operator = track(mc.spawn(kctlBin, ['operator', 'run', '--kubeconfig', adminConf]));
  await waitFor('the operator leads', 60_000, async () => operator.saw('leading: reconciling'), operator.log);
  const admin = `postgres://postgres@${pg.host}:${pg.port}/postgres?sslmode=disable`;
  assert.equal(
    (await c.kubectl(['create', 'secret', 'generic', 'pg-admin', `--from-literal=dataSource=${admin}`])).exitCode,
    0,
  );
  const object = (version: string) =>
    stringify({
      apiVersion: 'kctl.dev/v1alpha1',
      kind: 'KctlCluster',
      metadata: { name: 'u1' },
      spec: {
        version,
        config: { profile: 'api-only' },
        datastore: { postgres: { secretName: 'pg-admin' } },
        exposure: { nodePort: NODE_PORT },
      },
    });
  type Status = {
    conditions?: { type: string; status: string; reason: string; message: string }[];
    version?: string;
  };
  const status = async () =>
    JSON.parse(String((await c.kubectl(['get', 'kc', 'u1', '-o', 'jsonpath={.status}'])).stdout) || '{}') as Status;
  const condition = (s: Status, type: string) => s.conditions?.find((x) => x.type === type);
  const log = async () => JSON.stringify(await status()) + operator.log();

  assert.equal((await c.kubectl(['apply', '-f', '-'], object(previous.version))).exitCode, 0);
  await waitFor(
    'u1 runs the previous kctl',
    300_000,
    async () => (await status()).version === previous.version && condition(await status(), 'Ready')?.status === 'True',
    log,
  );
  const kc = await c.kubectl(['get', 'secret', 'u1-admin-kubeconfig', '-o', 'jsonpath={.data.kubeconfig}']);
  const kubeconfig = join(dir, 'u1.conf');
  await writeFile(kubeconfig, Buffer.from(String(kc.stdout), 'base64'), { mode: 0o600 });
  const hosted = (args: string[]) =>
    out.run(
      join(c.dataDir, 'bin', 'current', 'kubectl'),
      ['--kubeconfig', kubeconfig, '--request-timeout=10s', ...args],
      {
        timeout: 30_000,
      },
    );
  const serverVersion = async () =>
    (JSON.parse(String((await hosted(['version', '-o', 'json'])).stdout)) as { serverVersion?: { gitVersion: string } })
      .serverVersion?.gitVersion;
  const before = await serverVersion();
  assert.ok(before, 'the hosted API gave no version');
  assert.equal((await hosted(['create', 'configmap', 'kept', '--from-literal=from=previous'])).exitCode, 0);
  const ca = String((await c.kubectl(['get', 'secret', 'u1-pki', '-o', 'jsonpath={.data.ca\\.crt}'])).stdout);

  // The upgrade: one field.
  const started = Date.now();
  assert.equal((await c.kubectl(['apply', '-f', '-'], object(KCTL_VERSION))).exitCode, 0);
  await waitFor(
    'u1 rolled to this kctl',
    300_000,
    async () => {
      const s = await status();
      return s.version === KCTL_VERSION && condition(s, 'Progressing')?.reason === 'Rolled';
    },
    log,
  );
  t.diagnostic(`rolled from ${previous.version} to ${KCTL_VERSION} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  // Every pod that is not on its way out runs the new image (rolled, as kubectl rollout status
  // counts: the old pod may still be stopping).
  const pods = JSON.parse(
    String((await c.kubectl(['get', 'pod', '-l', 'kctl.dev/cluster=u1', '-o', 'json'])).stdout),
  ) as { items: { metadata: { deletionTimestamp?: string }; spec: { containers: { image: string }[] } }[] };
  const serving = pods.items.filter((p) => !p.metadata.deletionTimestamp).map((p) => p.spec.containers[0]!.image);
  assert.deepEqual(serving, [kctlImageOf(KCTL_VERSION)]);
  await waitFor('the hosted API answers after the roll', 60_000, async () => (await serverVersion()) !== undefined);
  const after = await serverVersion();
  assert.notEqual(after, before, `the hosted API still runs ${before}`);
  const kept = await hosted(['get', 'configmap', 'kept', '-o', 'jsonpath={.data.from}']);
  assert.equal(String(kept.stdout), 'previous', String(kept.stderr));
  assert.equal(String((await c.kubectl(['get', 'secret', 'u1-pki', '-o', 'jsonpath={.data.ca\\.crt}'])).stdout), ca);

  // Back to the previous version: refused, the pods left as they were.
  assert.equal((await c.kubectl(['apply', '-f', '-'], object(previous.version))).exitCode, 0);
  await waitFor(
    'the downgrade is refused',
    60_000,
    async () => condition(await status(), 'Degraded')?.reason === 'DowngradeRefused',
    log,
  );
  const still = await c.kubectl(['get', 'deploy', 'u1', '-o', 'jsonpath={.spec.template.spec.containers[0].image}']);
  assert.equal(String(still.stdout), kctlImageOf(KCTL_VERSION));
  assert.equal(condition(await status(), 'Ready')?.status, 'True');
});
