// A control plane as a pod: kctl's own image (`kctl airgap save-images kctl.local/kctl:v...`, made
// from dist/kctl, imported by a kctl worker from its images directory without a registry) runs
// `kctl controller` for an api-only cluster in a Deployment on a kctl management cluster, behind
// a NodePort Service. Its state lives outside the pod: its CAs and keys in a Secret (`kctl pki
// save-shared`, read with `--shared-pki`), its data in kine on a PostgreSQL on another lab host.
// An admin on another host reaches the hosted API through the management node's port and writes
// to it; the pod is deleted, and the next one is the same cluster: the same CA, the object still
// there, the admin's kubeconfig still good. The hosted cluster's CA is its own, not the management
// cluster's. The first step of control planes on a management cluster: the operator and the CRD
// come later.
import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import type { ControllerStatusReport } from '../../../src/controller/leases/status.ts';
import { KCTL_IMAGE } from '../../../src/payload/images.ts';
import { startManagementLab } from '../lab/management.ts';
import { waitFor } from '../../wait.ts';

/** The hosted API listens on the NodePort's own number, so the URL in its kubeconfig is right as it is. */
const NODE_PORT = 30643;

/** The hosted cluster's config: api-only, its API at the management node's port, kine on PostgreSQL. */
const hostedConfig = (address: string, dataSource: string): string =>
  `spec:\n  profile: api-only\n  api: { address: ${address}, port: ${NODE_PORT} }\n  storage: { type: kine, kine: { dataSource: '${dataSource}' } }\n`;

/**
 * An api-only kctl controller in a Deployment, its config in a ConfigMap, its CAs and keys from
 * the Secret `<name>-pki`, behind a NodePort Service.
 */
function hostedControlPlane(name: string, config: string): string {
  const labels = { app: name };
  const objects = [
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name }, data: { 'kctl.yaml': config } },
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name },
      spec: {
        replicas: 1,
        selector: { matchLabels: labels },
        template: {
          metadata: { labels },
          spec: {
            terminationGracePeriodSeconds: 10,
            containers: [
              {
                name: 'kctl',
                image: KCTL_IMAGE,
                imagePullPolicy: 'Never',
                args: ['controller', '--config', '/etc/kctl/kctl.yaml', '--shared-pki', '/etc/kctl/pki'],
                ports: [{ containerPort: NODE_PORT }],
                readinessProbe: { tcpSocket: { port: NODE_PORT }, periodSeconds: 2 },
                volumeMounts: [
                  { name: 'config', mountPath: '/etc/kctl/kctl.yaml', subPath: 'kctl.yaml' },
                  { name: 'pki', mountPath: '/etc/kctl/pki', readOnly: true },
                  { name: 'data', mountPath: '/var/lib/kctl' },
                ],
              },
            ],
            volumes: [
              { name: 'config', configMap: { name } },
              { name: 'pki', secret: { secretName: `${name}-pki`, defaultMode: 0o400 } },
              { name: 'data', emptyDir: {} },
            ],
          },
        },
      },
    },
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name },
      spec: { type: 'NodePort', selector: labels, ports: [{ port: NODE_PORT, nodePort: NODE_PORT }] },
    },
  ];
  return objects.map((o) => JSON.stringify(o)).join('\n');
}

/** The hosted control plane's pods, by name, with whether each is ready. */
async function podsOf(kubectl: (args: string[]) => Promise<{ stdout: unknown }>, app: string): Promise<string[]> {
  const jsonpath = '{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}';
  return String((await kubectl(['get', 'pod', '-l', `app=${app}`, '-o', `jsonpath=${jsonpath}`])).stdout)
    .split('\n')
    .filter(Boolean);
}

test("an api-only control plane runs as a pod of kctl's own image on a kctl management cluster, its CAs in a Secret and its data in PostgreSQL; an admin elsewhere reaches it through a NodePort; the next pod is the same cluster", async (t) => {
  const { dir, kctlBin, c, mc, mw, out, pg } = await startManagementLab(t, 'hcp', {
    dir: 'kctl-hosted-',
    pgPort: 15432,
  });
  // The hosted cluster's database, on the management controller's host.
  const config = hostedConfig(mw.ip, await pg.dataSource('t1'));

  // Its CAs and keys, made once outside the pod and kept in a Secret.
  await writeFile(join(dir, 't1.yaml'), config);
  const init = await mc.run(
    kctlBin,
    ['controller', '--init-only', '--config', join(dir, 't1.yaml'), '--data-dir', join(dir, 't1-init')],
    { timeout: 180_000 },
  );
  assert.equal(init.exitCode, 0, String(init.stderr));
  const shared = await mc.run(kctlBin, [
    'pki',
    'save-shared',
    '--data-dir',
    join(dir, 't1-init'),
    '--dir',
    join(dir, 't1-shared'),
  ]);
  assert.equal(shared.exitCode, 0, String(shared.stderr));
  const secret = await c.kubectl(['create', 'secret', 'generic', 't1-pki', `--from-file=${join(dir, 't1-shared')}`]);
  assert.equal(secret.exitCode, 0, String(secret.stderr));

  const applied = await c.kubectl(['apply', '-f', '-'], hostedControlPlane('t1', config));
  assert.equal(applied.exitCode, 0, String(applied.stderr));
  const whyNot = async () =>
    String((await c.kubectl(['describe', 'pod', '-l', 'app=t1'])).stdout) +
    String((await c.kubectl(['logs', 'deploy/t1', '--tail=20'])).stdout);
  const started = Date.now();
  const [first] = await waitFor(
    'the hosted control plane is ready',
    300_000,
    async () => {
      const pods = await podsOf(c.kubectl, 't1');
      return pods.length === 1 && pods[0]!.endsWith('=True') && pods.map((p) => p.split('=')[0]!);
    },
    whyNot,
  );
  t.diagnostic(`hosted control plane ready ${((Date.now() - started) / 1000).toFixed(1)} s after apply`);

  // Inside the pod, kctl reports an api-only control plane on kine, as on a host.
  const status = JSON.parse(
    String((await c.kubectl(['exec', 'deploy/t1', '--', 'kctl', 'status', '-o', 'json'])).stdout),
  ) as ControllerStatusReport;
  const parts = status.components.map((x) => x.name);
  for (const p of ['kine', 'kube-apiserver', 'kube-controller-manager']) assert.ok(parts.includes(p), parts.join(' '));

  // An admin on another host: the pod's admin kubeconfig, at the management node's port.
  const admin = await c.kubectl(['exec', 'deploy/t1', '--', 'kctl', 'kubeconfig', 'admin']);
  assert.equal(admin.exitCode, 0, String(admin.stderr));
  const kubeconfig = join(dir, 't1.conf');
  await writeFile(kubeconfig, String(admin.stdout).replace(/server: .*/, `server: https://${mw.ip}:${NODE_PORT}`), {
    mode: 0o600,
  });
  const kubectl = join(c.dataDir, 'bin', 'current', 'kubectl');
  const hosted = (args: string[], input?: string) =>
    out.run(kubectl, ['--kubeconfig', kubeconfig, '--request-timeout=20s', ...args], { timeout: 60_000, input });
  const created = await hosted(['create', 'configmap', 'hello', '--from-literal=where=hosted']);
  assert.equal(created.exitCode, 0, String(created.stderr));
  // Its own cluster: the object is not in the management cluster, and the CAs differ.
  assert.notEqual((await c.kubectl(['get', 'configmap', 'hello'])).exitCode, 0);
  const caOf = (kubeconfigText: string) => /certificate-authority-data: (\S+)/.exec(kubeconfigText)?.[1];
  const hostedCa = caOf(String(admin.stdout));
  const managementCa = caOf(await readFile(join(c.dataDir, 'pki', 'admin.conf'), 'utf8'));
  assert.ok(hostedCa && managementCa && hostedCa !== managementCa, 'the hosted cluster has a CA of its own');
  assert.equal(Buffer.from(hostedCa, 'base64').toString(), await readFile(join(dir, 't1-shared', 'ca.crt'), 'utf8'));

  // The pod goes; the Deployment makes another, with an empty data dir: the same cluster comes back.
  assert.equal((await c.kubectl(['delete', 'pod', first!, '--wait=false'])).exitCode, 0);
  const [second] = await waitFor(
    'a new pod of the hosted control plane is ready',
    300_000,
    async () => {
      const pods = (await podsOf(c.kubectl, 't1')).filter((p) => !p.startsWith(`${first}=`));
      return pods.length === 1 && pods[0]!.endsWith('=True') && pods.map((p) => p.split('=')[0]!);
    },
    whyNot,
  );
  const again = await c.kubectl(['exec', second!, '--', 'kctl', 'kubeconfig', 'admin']);
  assert.equal(caOf(String(again.stdout)), hostedCa, 'the new pod serves with the same CA');
  const read = await waitFor('the admin reads what it wrote before, through the new pod', 60_000, async () => {
    const r = await hosted(['get', 'configmap', 'hello', '-o', 'jsonpath={.data.where}']);
    return r.exitCode === 0 && String(r.stdout);
  });
  assert.equal(read, 'hosted');
});
