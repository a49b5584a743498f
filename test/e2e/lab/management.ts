// A kctl management cluster for the hosted tests (test/e2e/hosted/): host mc runs the controller
// and a PostgreSQL for the hosted clusters' data; mw (and mw2, with spare) are its workers, where
// their pods run, with the kctl image (made from this kctl) in their images directories; out is
// another host, for admins.
import assert from 'node:assert/strict';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Result } from 'execa';
import { stringify } from 'yaml';
import { KCTL_VERSION } from '../../../src/base/version.ts';
import { KCTL_IMAGE, kctlImageOf } from '../../../src/payload/images.ts';
import { waitFor } from '../../wait.ts';
import { controllerReady, labController, startLabWorker, track, type LabController, type Tracked } from './cluster.ts';
import { startLab, type LabTest } from './lab-test.ts';
import type { LabHost } from './lab.ts';
import { startPostgres, type Postgres } from './postgres.ts';

export interface ManagementLab extends LabTest {
  c: LabController;
  mc: LabHost;
  mw: LabHost;
  out: LabHost;
  pg: Postgres;
}

/**
 * Starts lab `name` (its directory prefixed `dir`) with the management cluster ready and PostgreSQL
 * on `pgPort`. `spare` adds a second management worker, mw2 (a control-plane pod may move there);
 * `nodes` are further hosts that run `kctl worker` for hosted clusters (startLabWorker's layout);
 * `kctls` are further kctl executables whose own images the management workers get (a test build).
 */
export async function startManagementLab(
  t: { after: (fn: () => Promise<void>) => void },
  name: string,
  o: {
    dir: string;
    pgPort: number;
    nodes?: string[];
    spare?: boolean;
    kctls?: { path: string; version: string }[];
    /** PostgreSQL's max_connections (bench/operator.ts: many clusters). */
    pgMaxConnections?: number;
  },
): Promise<ManagementLab> {
  const workers = o.spare ? ['mw', 'mw2'] : ['mw'];
  const nodes = o.nodes ?? [];
  const test = await startLab(t, name, ['mc', ...workers, 'out', ...nodes], {
    dir: o.dir,
    workers: [...workers, ...nodes],
  });
  const { lab, dir, kctlBin } = test;
  const [mc, mw, out] = [lab.host('mc'), lab.host('mw'), lab.host('out')];
  // Each image is saved apart (every kctl names its file kctl.oci.tar), then moved in by its tag.
  const kctls = [
    { path: kctlBin, image: KCTL_IMAGE },
    ...(o.kctls ?? []).map((k) => ({ path: k.path, image: kctlImageOf(k.version) })),
  ];
  for (const w of workers)
    for (const { path, image } of kctls) {
      const apart = join(dir, 'saved-image');
      const save = await lab.host(w).run(path, ['airgap', 'save-images', image, '--dir', apart], { timeout: 300_000 });
      assert.equal(save.exitCode, 0, String(save.stderr));
      await mkdir(join(dir, `${w}-data`, 'images'), { recursive: true });
      await rename(join(apart, 'kctl.oci.tar'), join(dir, `${w}-data`, 'images', `${image.split(':').at(-1)}.oci.tar`));
    }
  const c = await labController(kctlBin, mc, dir);
  await controllerReady(track(mc.spawn(kctlBin, c.args)));
  const token = await c.createToken('1h');
  const started = workers.map((w) => startLabWorker(kctlBin, lab.host(w), dir, token));
  // Pods reach it through mw, from the pod network.
  const pg = await startPostgres(t, o.pgPort, { host: mc, trust: '0.0.0.0/0' }, o.pgMaxConnections);
  for (const worker of started)
    await waitFor('management worker ready', 240_000, async () => worker.saw('"msg":"worker ready"'), worker.log);
  return { ...test, c, mc, mw, out, pg };
}

/**
 * The KctlCluster CRD installed, `kctl operator run` as a process on mc (operator.test.ts runs it
 * as its Deployment), and the Secret `secret` holding the lab PostgreSQL's URL as `dataSource`;
 * resolves once the operator leads.
 */
export async function startOperator(m: ManagementLab, secret = 'pg-admin'): Promise<Tracked> {
  const { c, mc, kctlBin, pg } = m;
  const must = async (what: string, r: Promise<{ exitCode?: number; stderr?: unknown }>) => {
    const x = await r;
    assert.equal(x.exitCode, 0, `${what}: ${String(x.stderr)}`);
  };
  const crd = await mc.run(kctlBin, ['operator', 'crd']);
  await must('the CRD', c.kubectl(['apply', '-f', '-'], String(crd.stdout)));
  await c.kubectl(['wait', '--for=condition=Established', 'crd/kctlclusters.kctl.dev', '--timeout=60s']);
  const operator = track(mc.spawn(kctlBin, ['operator', 'run', '--kubeconfig', join(c.dataDir, 'pki', 'admin.conf')]));
  await waitFor('the operator leads', 60_000, async () => operator.saw('leading: reconciling'), operator.log);
  const admin = `postgres://postgres@${pg.host}:${pg.port}/postgres?sslmode=disable`;
  await must(
    'the datastore Secret',
    c.kubectl(['create', 'secret', 'generic', secret, `--from-literal=dataSource=${admin}`]),
  );
  return operator;
}

/**
 * kubectl on host out with the admin kubeconfig the operator keeps for hosted cluster `name`
 * (written to the lab's directory); each call gives up after `timeoutS` seconds.
 */
export async function hostedKubectl(
  m: ManagementLab,
  name: string,
  timeoutS = 20,
): Promise<(args: string[], input?: string) => Promise<Result>> {
  const kc = await m.c.kubectl(['get', 'secret', `${name}-admin-kubeconfig`, '-o', 'jsonpath={.data.kubeconfig}']);
  const kubeconfig = join(m.dir, `${name}.conf`);
  await writeFile(kubeconfig, Buffer.from(String(kc.stdout), 'base64'), { mode: 0o600 });
  const kubectl = join(m.c.dataDir, 'bin', 'current', 'kubectl');
  return (args, input) =>
    m.out.run(kubectl, ['--kubeconfig', kubeconfig, `--request-timeout=${timeoutS}s`, ...args], {
      timeout: (timeoutS + 40) * 1000,
      input,
    });
}

/**
 * A Deployment `tenant-reader` on the management cluster, of this kctl's image, that watches a
 * tenant's ConfigMaps (`kctl kubectl get configmaps --watch`) with the kubeconfig kept in Secret
 * `secretName`; returns a reader of its log.
 */
export async function startTenantReader(c: LabController, secretName: string): Promise<() => Promise<string>> {
  const reader = stringify({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'tenant-reader' },
    spec: {
      selector: { matchLabels: { app: 'tenant-reader' } },
      template: {
        metadata: { labels: { app: 'tenant-reader' } },
        spec: {
          containers: [
            {
              name: 'reader',
              image: kctlImageOf(KCTL_VERSION),
              imagePullPolicy: 'Never',
              args: ['kubectl', '--kubeconfig', '/creds/kubeconfig', 'get', 'configmaps', '--watch', '-o', 'name'],
              volumeMounts: [
                { name: 'creds', mountPath: '/creds', readOnly: true },
                { name: 'data', mountPath: '/var/lib/kctl' },
              ],
            },
          ],
          volumes: [
            { name: 'creds', secret: { secretName } },
            { name: 'data', emptyDir: {} },
          ],
        },
      },
    },
  });
  const applied = await c.kubectl(['apply', '-f', '-'], reader);
  assert.equal(applied.exitCode, 0, String(applied.stderr));
  return async () => {
    const r = await c.kubectl(['logs', 'deploy/tenant-reader']);
    return `${String(r.stdout)}${String(r.stderr)}`;
  };
}
