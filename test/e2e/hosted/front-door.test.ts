// A hosted cluster behind the management cluster's front door (`kctl operator manifests
// --front-door-domain ... --front-door-address ...`: the operator and the door as Deployments of
// the kctl image, the door a DaemonSet behind one node port). KctlCluster f1 with spec.exposure.type FrontDoor
// gets a ClusterIP Service only; its status names it by name at the door, and its admin kubeconfig
// reaches it there. A worker on host e1, whose only way out is the door's one port (every other
// new outbound TCP connection rejected), joins with a token `kctl cluster token` mints, becomes
// Ready, runs a pod and answers logs and exec: the join check, kubelet's API, the agent's tunnel
// all pass the door by name. The control-plane pod sees e1's stream arrive through the door with
// e1's own address (the door's PROXY header). A name nobody has gets nothing. With two
// control-plane pods, e1's agent holds a stream to each through the door. Each pod's kine keeps
// within its connection bound on the shared PostgreSQL. A second cluster of the same name in another
// namespace is refused the name, and the first keeps it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { stringify } from 'yaml';
import { KCTL_VERSION } from '../../../src/base/version.ts';
import { nodeReady, runPinnedPod, startLabWorker } from '../lab/cluster.ts';
import { kctl } from '../lab/kctl.ts';
import { hostedKubectl, startManagementLab } from '../lab/management.ts';
import { waitFor } from '../../wait.ts';

const DOOR_PORT = 30443;
const DOMAIN = 'clusters.test';

test("a hosted cluster behind the management cluster's front door: its worker's only way out is the door's port, and it joins, runs a pod and answers logs and exec, through one control-plane pod and through two", async (t) => {
  const m = await startManagementLab(t, 'hfd', { dir: 'kctl-hosted-door-', pgPort: 15439, nodes: ['e1'] });
  const { lab, dir, kctlBin, c, mc, mw, out, pg } = m;
  const e1 = lab.host('e1');
  const door = `${mw.ip}:${DOOR_PORT}`;

  const crd = await kctl(['operator', 'crd']);
  assert.equal((await c.kubectl(['apply', '-f', '-'], String(crd.stdout))).exitCode, 0);
  await c.kubectl(['wait', '--for=condition=Established', 'crd/kctlclusters.kctl.dev', '--timeout=60s']);
  const manifests = await kctl([
    'operator',
    'manifests',
    '--replicas',
    '1',
    '--front-door-domain',
    DOMAIN,
    '--front-door-address',
    door,
  ]);
  assert.equal(manifests.exitCode, 0, String(manifests.stderr));
  const applied = await c.kubectl(['apply', '-f', '-'], String(manifests.stdout));
  assert.equal(applied.exitCode, 0, String(applied.stderr));
  const logsOf = async (name: string) =>
    String((await c.kubectl(['logs', '-n', 'kctl-system', name, '--tail=20'])).stdout);
  // The operator as a Deployment, the door as a DaemonSet (one pod on mw, the one management worker).
  for (const [name, ready] of [
    ['deploy/kctl-operator', '{.status.readyReplicas}'],
    ['ds/kctl-front-door', '{.status.numberReady}'],
  ] as const)
    await waitFor(
      `${name} ready`,
      180_000,
      async () =>
        String((await c.kubectl(['get', name, '-n', 'kctl-system', '-o', `jsonpath=${ready}`])).stdout) === '1',
      () => logsOf(name),
    );
  const admin = `postgres://postgres@${pg.host}:${pg.port}/postgres?sslmode=disable`;
  assert.equal(
    (await c.kubectl(['create', 'secret', 'generic', 'pg-admin', `--from-literal=dataSource=${admin}`])).exitCode,
    0,
  );

  const f1 = stringify({
    apiVersion: 'kctl.dev/v1alpha1',
    kind: 'KctlCluster',
    metadata: { name: 'f1' },
    spec: {
      version: KCTL_VERSION,
      datastore: { postgres: { secretName: 'pg-admin' } },
      exposure: { type: 'FrontDoor' },
    },
  });
  assert.equal((await c.kubectl(['apply', '-f', '-'], f1)).exitCode, 0);
  const adminConf = `${c.dataDir}/pki/admin.conf`;
  const list = async () => {
    const r = await out.run(kctlBin, ['cluster', 'list', '-o', 'json', '--kubeconfig', adminConf], { timeout: 30_000 });
    return JSON.parse(String(r.stdout) || '[]') as { name: string; ready: string; endpoint?: string }[];
  };
  const story = async () =>
    JSON.stringify(await list()) +
    String((await c.kubectl(['get', 'pod,svc', '-A', '-o', 'wide'])).stdout) +
    String((await c.kubectl(['logs', 'deploy/f1', '--tail=30'])).stdout) +
    (await logsOf('deploy/kctl-operator')) +
    (await logsOf('ds/kctl-front-door'));
  const started = Date.now();
  await waitFor('f1 Ready', 300_000, async () => (await list()).find((x) => x.name === 'f1')?.ready === 'True', story);
  t.diagnostic(`f1 Ready ${((Date.now() - started) / 1000).toFixed(1)} s after the apply`);
  assert.equal((await list()).find((x) => x.name === 'f1')?.endpoint, `https://f1.${DOMAIN}:${DOOR_PORT}`);
  // Behind the door, the cluster has no port of its own outside the management cluster.
  const svcType = await c.kubectl(['get', 'svc', 'f1', '-o', 'jsonpath={.spec.type}']);
  assert.equal(String(svcType.stdout), 'ClusterIP');

  // The admin kubeconfig names the door's address and the API's name (tls-server-name).
  const hosted = await hostedKubectl(m, 'f1');
  const ns = await hosted(['get', 'ns', 'kube-system', '-o', 'name']);
  assert.equal(ns.exitCode, 0, String(ns.stderr));
  // By name at the door: f1's API answers TLS; a name no cluster has is closed before any certificate.
  const curl = (name: string) =>
    out.run('curl', [
      '-sk',
      '--max-time',
      '10',
      '--resolve',
      `${name}:${DOOR_PORT}:${mw.ip}`,
      `https://${name}:${DOOR_PORT}/readyz`,
    ]);
  assert.equal((await curl(`f1.${DOMAIN}`)).exitCode, 0);
  const nobody = await curl(`nobody.${DOMAIN}`);
  assert.ok(
    [35, 56].includes(nobody.exitCode ?? 0),
    `curl to an unknown name: exit ${nobody.exitCode} ${String(nobody.stderr)}`,
  );

  // e1 may open TCP connections to the door's port and nowhere else (loopback aside).
  const ipt = async (...a: string[]) => {
    const r = await e1.run('iptables', ['-w', '5', ...a]);
    assert.equal(r.exitCode, 0, `iptables ${a.join(' ')}: ${String(r.stderr)}`);
  };
  await ipt('-A', 'OUTPUT', '-o', 'lo', '-j', 'ACCEPT');
  await ipt('-A', 'OUTPUT', '-p', 'tcp', '-d', mw.ip, '--dport', String(DOOR_PORT), '-j', 'ACCEPT');
  await ipt('-A', 'OUTPUT', '-p', 'tcp', '--syn', '-j', 'REJECT', '--reject-with', 'tcp-reset');
  await lab.isolate(e1, mc, mw);
  assert.equal(await lab.canConnect(e1, mc, 6443, 2_000), false, 'e1 reaches the management API directly');

  const minted = await out.run(kctlBin, ['cluster', 'token', 'f1', '--expiry', '1h', '--kubeconfig', adminConf]);
  assert.equal(minted.exitCode, 0, String(minted.stderr));
  const worker = startLabWorker(kctlBin, e1, dir, String(minted.stdout).trim());
  await waitFor(
    'e1 a Ready node of f1',
    300_000,
    () => nodeReady(hosted, 'e1'),
    async () => worker.log().slice(-4000) + (await story()),
  );
  await runPinnedPod(hosted, 'hello', 'e1', 'hello-through-the-door');
  const logs = await hosted(['logs', 'hello']);
  assert.equal(logs.exitCode, 0, String(logs.stderr));
  assert.match(String(logs.stdout), /hello-through-the-door/);
  const exec = await hosted(['exec', 'hello', '--', 'sh', '-c', 'echo exec-$((6*7))']);
  assert.equal(exec.exitCode, 0, String(exec.stderr));
  assert.equal(String(exec.stdout).trim(), 'exec-42');

  // Its kine holds at most its pool's bound of connections to the shared PostgreSQL (15).
  const connections = async () =>
    Number((await pg.sql("select count(*) from pg_stat_activity where datname like 'kctl_default_f1_%'")).trim());
  const one = await connections();
  t.diagnostic(`f1's connections to PostgreSQL with one control-plane pod: ${one}`);
  assert.ok(one >= 1 && one <= 15, `${one} connections`);

  // The control-plane pod holds e1's stream as arriving through the door, from e1's own address.
  const status = await c.kubectl(['exec', 'deploy/f1', '--', 'kctl', 'status', '-o', 'json']);
  assert.equal(status.exitCode, 0, String(status.stderr));
  const report = JSON.parse(String(status.stdout)) as {
    konnectivity?: { agents: { id: string; via?: string; client?: string }[] };
    frontDoor?: { external?: { address: string } };
  };
  assert.equal(report.frontDoor?.external?.address, door);
  const agents = report.konnectivity?.agents;
  assert.deepEqual(
    agents?.map((a) => `${a.id} ${a.via} ${a.client}`),
    [`system:node:e1 front-door ${e1.ip}`],
  );

  // Two control-plane pods behind the door: e1's agent dials the door once per live lease and holds
  // a stream to each pod (the door passes each dial to one of them), and exec runs through each
  // pod's own kube-apiserver and tunnel.
  const leases = async () => {
    const r = await hosted(['get', 'leases', '-n', 'kube-system', '-l', 'kctl.dev/controller=true', '-o', 'json']);
    return (
      JSON.parse(String(r.stdout) || '{"items":[]}') as {
        items: { metadata: { name: string; annotations?: Record<string, string> } }[];
      }
    ).items.map((l) => ({
      name: l.metadata.name,
      agents: (l.metadata.annotations?.['kctl.dev/agents'] ?? '').split(',').filter(Boolean),
    }));
  };
  const scaled = Date.now();
  assert.equal((await c.kubectl(['patch', 'kc', 'f1', '--type=merge', '-p', '{"spec":{"replicas":2}}'])).exitCode, 0);
  await waitFor(
    "two pods of f1, each holding e1's agent",
    300_000,
    async () => {
      const held = await leases();
      return held.length === 2 && held.every((l) => l.agents.includes('system:node:e1'));
    },
    async () => JSON.stringify(await leases()) + worker.log().slice(-3000) + (await story()),
  );
  t.diagnostic(`two control-plane pods hold e1's agent ${((Date.now() - scaled) / 1000).toFixed(1)} s after the patch`);
  const two = await connections();
  t.diagnostic(`f1's connections to PostgreSQL with two control-plane pods: ${two}`);
  assert.ok(two <= 30, `${two} connections`);
  const pods = String(
    (await c.kubectl(['get', 'pod', '-l', 'kctl.dev/cluster=f1', '-o', 'jsonpath={.items[*].metadata.name}'])).stdout,
  )
    .split(' ')
    .filter(Boolean);
  assert.equal(pods.length, 2);
  for (const pod of pods) {
    const r = await c.kubectl([
      'exec',
      pod,
      '--',
      'kctl',
      'kubectl',
      '--server',
      'https://127.0.0.1:6443',
      'exec',
      'hello',
      '--',
      'echo',
      `via-${pod}`,
    ]);
    assert.equal(r.exitCode, 0, String(r.stderr));
    assert.equal(String(r.stdout).trim(), `via-${pod}`);
  }

  // Another f1, in another namespace, behind the door: the name is the older one's.
  assert.equal((await c.kubectl(['create', 'namespace', 'other'])).exitCode, 0);
  assert.equal(
    (await c.kubectl(['create', 'secret', 'generic', 'pg-admin', '-n', 'other', `--from-literal=dataSource=${admin}`]))
      .exitCode,
    0,
  );
  assert.equal((await c.kubectl(['apply', '-n', 'other', '-f', '-'], f1)).exitCode, 0);
  const degraded = await waitFor('the second f1 refused its name', 60_000, async () => {
    const r = await c.kubectl([
      'get',
      'kc',
      'f1',
      '-n',
      'other',
      '-o',
      'jsonpath={.status.conditions[?(@.type=="Degraded")].message}',
    ]);
    return String(r.stdout).includes('front door name') ? String(r.stdout) : undefined;
  });
  assert.match(degraded, /the front door name f1\.clusters\.test is KctlCluster default\/f1's \(older\)/);
  // Refused before anything was made for it: no database, no CA Secret.
  assert.equal((await pg.sql("select datname from pg_database where datname like 'kctl_other_f1_%'")).trim(), '');
  assert.notEqual((await c.kubectl(['get', 'secret', 'f1-pki', '-n', 'other'])).exitCode, 0);
  const after = await hosted(['exec', 'hello', '--', 'echo', 'still-f1']);
  assert.equal(String(after.stdout).trim(), 'still-f1', String(after.stderr));
});
