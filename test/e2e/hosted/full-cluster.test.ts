// A hosted full cluster with a node: the operator (here a process beside the management
// controller; operator.test.ts runs it as its Deployment) makes a KctlCluster with nodes a control
// plane on the management cluster, behind two node ports Kubernetes picks (its API and its agent
// port), which its pod also listens on. `kctl cluster token` mints a worker token in the hosted
// cluster naming them; a worker on host edge, which nothing on the management cluster can reach,
// joins with it, runs a pod, and the hosted API answers its logs and exec through the agent's
// tunnel. `kctl cluster list` shows the cluster with its node. Then the control-plane pod is
// killed and its node cordoned: the API is back from the other management node, and the hosted
// node stays Ready throughout.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { stringify } from 'yaml';
import { KCTL_VERSION } from '../../../src/base/version.ts';
import { nodeReady, runPinnedPod, startLabWorker, track } from '../lab/cluster.ts';
import { kctl } from '../lab/kctl.ts';
import { startManagementLab } from '../lab/management.ts';
import { waitFor } from '../../wait.ts';

const READY_SINCE = '{.status.conditions[?(@.type=="Ready")].lastTransitionTime}';

test('a hosted full cluster: a node elsewhere joins with a token the management cluster mints, runs a pod, answers logs and exec through its tunnel, and survives its control-plane pod killed on a cordoned node', async (t) => {
  const { lab, dir, kctlBin, c, mc, mw, out, pg } = await startManagementLab(t, 'hfl', {
    dir: 'kctl-hosted-full-',
    pgPort: 15434,
    nodes: ['edge'],
    spare: true,
  });
  const edge = lab.host('edge');
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
  // No node ports named: Kubernetes picks both.
  const object = stringify({
    apiVersion: 'kctl.dev/v1alpha1',
    kind: 'KctlCluster',
    metadata: { name: 'f1' },
    spec: { version: KCTL_VERSION, datastore: { postgres: { secretName: 'pg-admin' } } },
  });
  assert.equal((await c.kubectl(['apply', '-f', '-'], object)).exitCode, 0);
  const list = async () => {
    const r = await out.run(kctlBin, ['cluster', 'list', '--kubeconfig', adminConf, '-o', 'json'], {
      timeout: 30_000,
    });
    assert.equal(r.exitCode, 0, String(r.stderr));
    return JSON.parse(String(r.stdout)) as {
      name: string;
      ready: string;
      reason?: string;
      profile: string;
      version?: string;
      endpoint?: string;
      nodes?: { ready: number; total: number };
    }[];
  };
  const started = Date.now();
  await waitFor(
    'the hosted full cluster is Ready',
    300_000,
    async () => (await list())[0]?.ready === 'True',
    async () => JSON.stringify(await list()) + operator.log(),
  );
  t.diagnostic(`full KctlCluster Ready ${((Date.now() - started) / 1000).toFixed(1)} s after apply`);
  const [f1] = await list();
  assert.equal(f1!.profile, 'full');
  assert.equal(f1!.version, KCTL_VERSION);
  const svc = JSON.parse(String((await c.kubectl(['get', 'svc', 'f1', '-o', 'json'])).stdout)) as {
    spec: { ports: { name: string; nodePort: number; targetPort: number }[] };
  };
  const nodePort = (name: string) => svc.spec.ports.find((p) => p.name === name)!;
  // The pod listens on the ports it was given, so the endpoint and the token name what clients dial.
  assert.equal(nodePort('api').targetPort, nodePort('api').nodePort);
  assert.equal(nodePort('konnectivity').targetPort, nodePort('konnectivity').nodePort);
  assert.equal(f1!.endpoint, `https://${mw.ip}:${nodePort('api').nodePort}`);

  // A cluster the management cluster does not have: one line that says so.
  const none = await out.run(kctlBin, ['cluster', 'token', 'nope', '--kubeconfig', adminConf], { timeout: 30_000 });
  assert.notEqual(none.exitCode, 0);
  assert.match(String(none.stderr), /no KctlCluster default\/nope/);

  const minted = await out.run(kctlBin, ['cluster', 'token', 'f1', '--kubeconfig', adminConf, '--expiry', '1h'], {
    timeout: 30_000,
  });
  const podLog = async () =>
    String((await c.kubectl(['get', 'pod', '-o', 'wide'])).stdout) +
    String((await c.kubectl(['describe', 'pod', '-l', 'kctl.dev/cluster=f1'])).stdout)
      .split('\n')
      .slice(-15)
      .join('\n') +
    String((await c.kubectl(['logs', 'deploy/f1', '--tail=40'])).stdout) +
    String((await c.kubectl(['logs', 'deploy/f1', '--tail=40', '--previous'])).stdout);
  assert.equal(minted.exitCode, 0, String(minted.stderr) + (await podLog()));
  // Nothing on the management cluster reaches edge: its kubelet answers through the agent's tunnel only.
  await lab.isolate(edge, mw, mc);
  const worker = startLabWorker(kctlBin, edge, dir, String(minted.stdout).trim());
  await waitFor(
    'the hosted worker is ready',
    240_000,
    async () => worker.saw('"msg":"worker ready"'),
    async () => worker.log() + (await podLog()),
  );

  const kc = await c.kubectl(['get', 'secret', 'f1-admin-kubeconfig', '-o', 'jsonpath={.data.kubeconfig}']);
  const kubeconfig = join(dir, 'f1.conf');
  await writeFile(kubeconfig, Buffer.from(String(kc.stdout), 'base64'), { mode: 0o600 });
  const hosted = (args: string[], input?: string) =>
    out.run(
      join(c.dataDir, 'bin', 'current', 'kubectl'),
      ['--kubeconfig', kubeconfig, '--request-timeout=20s', ...args],
      {
        timeout: 60_000,
        input,
      },
    );
  await waitFor('edge is a Ready node of f1', 180_000, () => nodeReady(hosted, 'edge'), worker.log);
  await runPinnedPod(hosted, 'hello', 'edge', 'hello-from-edge').catch(async (err: Error) => {
    throw new Error(`${err.message}\n${await podLog()}`);
  });
  const logs = await hosted(['logs', 'hello']);
  assert.equal(logs.exitCode, 0, String(logs.stderr));
  assert.match(String(logs.stdout), /hello-from-edge/);
  const exec = await hosted(['exec', 'hello', '--', 'sh', '-c', 'echo exec-$((6*7))']);
  assert.equal(exec.exitCode, 0, String(exec.stderr));
  assert.equal(String(exec.stdout).trim(), 'exec-42');

  await waitFor(
    'kctl cluster list counts the node',
    60_000,
    async () => {
      const [x] = await list();
      return x?.nodes?.ready === 1 && x.nodes.total === 1;
    },
    async () => JSON.stringify(await list()) + operator.log(),
  );
  // The control plane never restarted on the way (a node joining, a pod, logs and exec).
  const restarts = await c.kubectl([
    'get',
    'pod',
    '-l',
    'kctl.dev/cluster=f1',
    '-o',
    'jsonpath={.items[*].status.containerStatuses[0].restartCount}',
  ]);
  assert.equal(String(restarts.stdout), '0', await podLog());
  const table = await out.run(kctlBin, ['cluster', 'list', '--kubeconfig', adminConf], { timeout: 30_000 });
  assert.match(
    String(table.stdout),
    new RegExp(`default\\s+f1\\s+True\\s+full\\s+${KCTL_VERSION.replace(/\./g, '\\.')}\\s+1/1\\s+https://`),
  );

  // The management cluster's own fault: the control-plane pod killed and its node cordoned. The
  // next pod runs on the other node, with the same CA, data and ports; edge stays a Ready node
  // (its Ready condition never changed) and its tunnel comes back to the new server.
  const readySince = async () =>
    String((await hosted(['get', 'node', 'edge', '-o', `jsonpath=${READY_SINCE}`])).stdout);
  const before = await readySince();
  assert.ok(before, 'edge has no Ready condition');
  const pods = async () =>
    (
      JSON.parse(String((await c.kubectl(['get', 'pod', '-l', 'kctl.dev/cluster=f1', '-o', 'json'])).stdout)) as {
        items: {
          metadata: { name: string; deletionTimestamp?: string };
          spec: { nodeName?: string };
          status: { containerStatuses?: { ready: boolean }[] };
        }[];
      }
    ).items;
  const [old] = await pods();
  const from = old!.spec.nodeName!;
  assert.equal((await c.kubectl(['cordon', from])).exitCode, 0);
  const killed = Date.now();
  assert.equal(
    (await c.kubectl(['delete', 'pod', old!.metadata.name, '--grace-period=0', '--force', '--wait=false'])).exitCode,
    0,
  );
  const probe = (args: string[]) =>
    out.run(
      join(c.dataDir, 'bin', 'current', 'kubectl'),
      ['--kubeconfig', kubeconfig, '--request-timeout=3s', ...args],
      {
        timeout: 10_000,
      },
    );
  await waitFor(
    'the hosted API answers from a pod on the other node',
    120_000,
    async () =>
      (await pods()).some(
        (p) => p.spec.nodeName !== from && !p.metadata.deletionTimestamp && p.status.containerStatuses?.[0]?.ready,
      ) && (await probe(['get', '--raw', '/readyz'])).exitCode === 0,
    podLog,
  );
  t.diagnostic(`hosted API back ${((Date.now() - killed) / 1000).toFixed(1)} s after its pod was killed`);
  assert.ok(await nodeReady(hosted, 'edge'), 'edge is not Ready after the failover');
  assert.equal(await readySince(), before, "edge's Ready condition changed during the failover");
  await waitFor(
    'exec through the tunnel to the new server',
    120_000,
    async () => String((await probe(['exec', 'hello', '--', 'echo', 'back'])).stdout).trim() === 'back',
    worker.log,
  );
});
