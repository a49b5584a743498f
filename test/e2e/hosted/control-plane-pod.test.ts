// A control plane as a pod: kctl's own image (`kctl airgap save-images kctl.local/kctl:v...`, made
// from dist/kctl, imported by a kctl worker from its images directory without a registry) runs
// `kctl controller` for an api-only cluster in a Deployment on a kctl management cluster, behind
// a NodePort Service. An admin on another lab host reaches the hosted API through the management
// node's port with the kubeconfig the pod prints, and writes and reads objects in it; the hosted
// cluster's CA is its own, not the management cluster's. The first step of control planes on a
// management cluster: the operator, the CRD and kept state come later.
import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import type { ControllerStatusReport } from '../../../src/controller/leases/status.ts';
import { KCTL_IMAGE } from '../../../src/payload/images.ts';
import { controllerReady, labController, startLabWorker, track } from '../lab/cluster.ts';
import { startLab } from '../lab/lab-test.ts';
import { waitFor } from '../../wait.ts';

/** The hosted API listens on the NodePort's own number, so the URL in its kubeconfig is right as it is. */
const NODE_PORT = 30643;

/** An api-only kctl controller in a Deployment, its config in a ConfigMap, behind a NodePort Service. */
function hostedControlPlane(name: string, address: string): string {
  const config = `spec:\n  profile: api-only\n  api: { address: ${address}, port: ${NODE_PORT} }\n`;
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
                args: ['controller', '--config', '/etc/kctl/kctl.yaml'],
                ports: [{ containerPort: NODE_PORT }],
                readinessProbe: { tcpSocket: { port: NODE_PORT }, periodSeconds: 2 },
                volumeMounts: [
                  { name: 'config', mountPath: '/etc/kctl' },
                  { name: 'data', mountPath: '/var/lib/kctl' },
                ],
              },
            ],
            volumes: [
              { name: 'config', configMap: { name } },
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

test("an api-only control plane runs as a pod of kctl's own image on a kctl management cluster; an admin elsewhere reaches its API through a NodePort", async (t) => {
  const { lab, dir, kctlBin } = await startLab(t, 'hcp', ['mc', 'mw', 'out'], { dir: 'kctl-hosted-', workers: ['mw'] });
  const [mc, mw, out] = [lab.host('mc'), lab.host('mw'), lab.host('out')];

  // The image, made from this kctl, where the management worker imports images at start.
  const save = await mw.run(kctlBin, ['airgap', 'save-images', KCTL_IMAGE, '--dir', join(dir, 'mw-data', 'images')], {
    timeout: 300_000,
  });
  assert.equal(save.exitCode, 0, String(save.stderr));

  const c = await labController(kctlBin, mc, dir);
  const controller = track(mc.spawn(kctlBin, c.args));
  await controllerReady(controller);
  const worker = startLabWorker(kctlBin, mw, dir, await c.createToken('1h'));
  await waitFor('management worker ready', 240_000, async () => worker.saw('"msg":"worker ready"'), worker.log);

  const applied = await c.kubectl(['apply', '-f', '-'], hostedControlPlane('t1', mw.ip));
  assert.equal(applied.exitCode, 0, String(applied.stderr));
  const started = Date.now();
  await waitFor(
    'the hosted control plane is ready',
    300_000,
    async () =>
      String((await c.kubectl(['get', 'deploy', 't1', '-o', 'jsonpath={.status.readyReplicas}'])).stdout).trim() ===
      '1',
    async () =>
      String((await c.kubectl(['describe', 'pod', '-l', 'app=t1'])).stdout) +
      String((await c.kubectl(['logs', 'deploy/t1', '--tail=20'])).stdout),
  );
  t.diagnostic(`hosted control plane ready ${((Date.now() - started) / 1000).toFixed(1)} s after apply`);

  // Inside the pod, kctl reports an api-only control plane, as on a host.
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
  const read = await hosted(['get', 'configmap', 'hello', '-o', 'jsonpath={.data.where}']);
  assert.equal(String(read.stdout), 'hosted', String(read.stderr));
  // Its own cluster: the object is not in the management cluster, and the CAs differ.
  assert.notEqual((await c.kubectl(['get', 'configmap', 'hello'])).exitCode, 0);
  const hostedCa = /certificate-authority-data: (\S+)/.exec(String(admin.stdout))?.[1];
  const managementCa = /certificate-authority-data: (\S+)/.exec(
    await readFile(join(c.dataDir, 'pki', 'admin.conf'), 'utf8'),
  )?.[1];
  assert.ok(hostedCa && managementCa && hostedCa !== managementCa, 'the hosted cluster has a CA of its own');
});
