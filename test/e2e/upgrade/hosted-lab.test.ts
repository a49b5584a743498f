// The hosted lab, end to end: one kctl management cluster (a controller on mc, pods on its workers
// mw and mw2), a PostgreSQL, and the operator, with three KctlClusters side by side:
// - f1, full, at this kctl: a worker on host e1 joins with a token `kctl cluster token` mints,
//   runs a pod, and answers logs and exec through its tunnel; then f1's control-plane pod is killed
//   and its node cordoned, and the API comes back from the other node while e1 stays Ready (its
//   Ready condition never changes); f1 is scaled to two pods (on two nodes, e1's agent held by
//   both, exec through each one's own kube-apiserver) and back to one, no request through the
//   Service failing while the pod goes; at the end f1 is deleted:
//   its pods, Secrets, Service, database and role go;
// - f2, full, at the previous test build's kctl (its image beside this one's on the management
//   workers), with a worker of that kctl on e2: spec.version set to this kctl's rolls the control
//   plane to the new image with its CA and data, e2 stays Ready and its pod runs on; going back is
//   refused and the pods are left as they were;
// - a1, api-only, with kept credentials of a tenant service account: a Deployment on the management
//   cluster lists a1's ConfigMaps with them, and a write with them is forbidden.
// Nothing on the management cluster reaches e1 or e2: their kubelets answer through the agents.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import type { Result } from 'execa';
import { stringify } from 'yaml';
import { KCTL_VERSION } from '../../../src/base/version.ts';
import { kctlImageOf } from '../../../src/payload/images.ts';
import { nodeReady, runPinnedPod, startLabWorker, type Tracked } from '../lab/cluster.ts';
import { requirePreviousKctl } from '../lab/kctl.ts';
import {
  hostedKubectl,
  startManagementLab,
  startOperator,
  startTenantReader,
  type ManagementLab,
} from '../lab/management.ts';
import { waitFor } from '../../wait.ts';

type Kubectl = (args: string[], input?: string) => Promise<Result>;
interface Listed {
  name: string;
  ready: string;
  reason?: string;
  profile: string;
  version?: string;
  endpoint?: string;
  nodes?: { ready: number; total: number };
  pods?: { ready: number; wanted: number };
}
interface Condition {
  type: string;
  status: string;
  reason: string;
  message: string;
}
interface PodItem {
  metadata: { name: string; deletionTimestamp?: string };
  spec: { nodeName?: string; containers: { image: string }[] };
  status: { containerStatuses?: { ready: boolean; restartCount: number }[] };
}

const READY_SINCE = '{.status.conditions[?(@.type=="Ready")].lastTransitionTime}';
const re = (s: string) => s.replace(/\./g, '\\.');

test(
  'the hosted lab: two full clusters with a worker each and an api-only one on one management cluster; a control-plane pod killed on a cordoned node, two control-plane pods and back to one, an upgrade by version, kept tenant credentials, and a delete that leaves nothing',
  { timeout: 40 * 60_000 },
  async (t: TestContext) => {
    const previous = requirePreviousKctl();
    const m = await startManagementLab(t, 'hlab', {
      dir: 'kctl-hosted-lab-',
      pgPort: 15437,
      nodes: ['e1', 'e2'],
      spare: true,
      kctls: [previous],
    });
    const { lab, dir, kctlBin, c, mc, mw, out, pg } = m;
    const adminConf = join(c.dataDir, 'pki', 'admin.conf');
    const operator = await startOperator(m);
    const mgmt = (args: string[]) => out.run(kctlBin, [...args, '--kubeconfig', adminConf], { timeout: 30_000 });
    const list = async (): Promise<Listed[]> => {
      const r = await mgmt(['cluster', 'list', '-o', 'json']);
      assert.equal(r.exitCode, 0, String(r.stderr));
      return JSON.parse(String(r.stdout)) as Listed[];
    };
    const listed = async (name: string) => (await list()).find((x) => x.name === name);
    const status = async (name: string) =>
      JSON.parse(String((await c.kubectl(['get', 'kc', name, '-o', 'jsonpath={.status}'])).stdout) || '{}') as {
        conditions?: Condition[];
        version?: string;
        kubernetesVersion?: string;
      };
    const condition = async (name: string, type: string) =>
      (await status(name)).conditions?.find((x) => x.type === type);
    const pods = async (name: string): Promise<PodItem[]> =>
      (
        JSON.parse(
          String((await c.kubectl(['get', 'pod', '-l', `kctl.dev/cluster=${name}`, '-o', 'json'])).stdout),
        ) as { items: PodItem[] }
      ).items;
    const story = async (name: string) =>
      JSON.stringify(await list()) +
      String((await c.kubectl(['get', 'pod', '-o', 'wide'])).stdout) +
      String((await c.kubectl(['logs', `deploy/${name}`, '--tail=30'])).stdout) +
      String((await c.kubectl(['get', 'events', '--field-selector', 'reason=Unhealthy'])).stdout) +
      operator.log().slice(-3000);

    // The three objects, applied at once.
    const cluster = (name: string, version: string, spec: Record<string, unknown> = {}) =>
      stringify({
        apiVersion: 'kctl.dev/v1alpha1',
        kind: 'KctlCluster',
        metadata: { name },
        spec: { version, datastore: { postgres: { secretName: 'pg-admin' } }, ...spec },
      });
    const a1Spec = {
      config: { profile: 'api-only' },
      serviceAccounts: [{ namespace: 'default', name: 'watcher', secretName: 'a1-watcher' }],
    };
    for (const object of [
      cluster('f1', KCTL_VERSION),
      cluster('f2', previous.version),
      cluster('a1', KCTL_VERSION, a1Spec),
    ])
      assert.equal((await c.kubectl(['apply', '-f', '-'], object)).exitCode, 0);
    const applied = Date.now();
    await waitFor(
      'f1, f2 and a1 Ready',
      420_000,
      async () => (await list()).filter((x) => x.ready === 'True').length === 3,
      () => story('f1'),
    );
    t.diagnostic(`three KctlClusters Ready ${((Date.now() - applied) / 1000).toFixed(1)} s after the apply`);
    const table = String((await mgmt(['cluster', 'list'])).stdout);
    assert.match(table, new RegExp(`default\\s+f1\\s+True\\s+full\\s+${re(KCTL_VERSION)}\\s`));
    assert.match(table, new RegExp(`default\\s+f2\\s+True\\s+full\\s+${re(previous.version)}\\s`));
    assert.match(table, new RegExp(`default\\s+a1\\s+True\\s+api-only\\s+${re(KCTL_VERSION)}\\s`));
    // The pods listen on the node ports they were given: the endpoint is what clients dial.
    const svc = JSON.parse(String((await c.kubectl(['get', 'svc', 'f1', '-o', 'json'])).stdout)) as {
      spec: { ports: { name: string; nodePort: number; targetPort: number }[] };
    };
    for (const p of svc.spec.ports) assert.equal(p.targetPort, p.nodePort, `port ${p.name}`);
    assert.equal(
      (await listed('f1'))?.endpoint,
      `https://${mw.ip}:${svc.spec.ports.find((p) => p.name === 'api')!.nodePort}`,
    );
    // Every cluster has its own database, owned by its own role.
    const databases = (
      await pg.sql("select datname, pg_get_userbyid(datdba) from pg_database where datname like 'kctl_default_%'")
    )
      .trim()
      .split('\n')
      .map((l) => l.split('|'));
    assert.equal(databases.length, 3, JSON.stringify(databases));
    for (const [db, owner] of databases) assert.equal(owner, db);

    // No token for a cluster without nodes, nor for one the management cluster does not have.
    const apiOnly = await mgmt(['cluster', 'token', 'a1']);
    assert.notEqual(apiOnly.exitCode, 0);
    assert.match(String(apiOnly.stderr), /KctlCluster default\/a1 is api-only/);
    const none = await mgmt(['cluster', 'token', 'nope']);
    assert.notEqual(none.exitCode, 0);
    assert.match(String(none.stderr), /no KctlCluster default\/nope/);

    /** A worker of `kctl` on `host` joins full cluster `name` with a minted token: Ready, a pod, logs and exec. */
    const join1 = async (name: string, hostName: string, kctl: string) => {
      const minted = await mgmt(['cluster', 'token', name, '--expiry', '1h']);
      if (minted.exitCode !== 0)
        assert.fail(`kctl cluster token ${name}: ${String(minted.stderr)}\n${await story(name)}`);
      const host = lab.host(hostName);
      await lab.isolate(host, mc, mw, lab.host('mw2'));
      const worker = startLabWorker(kctl, host, dir, String(minted.stdout).trim());
      const hosted = await hostedKubectl(m, name);
      await waitFor(
        `${hostName} a Ready node of ${name}`,
        300_000,
        () => nodeReady(hosted, hostName),
        async () => worker.log().slice(-4000) + (await story(name)),
      );
      await runPinnedPod(hosted, 'hello', hostName, `hello-from-${hostName}`);
      const logs = await hosted(['logs', 'hello']);
      assert.equal(logs.exitCode, 0, String(logs.stderr));
      assert.match(String(logs.stdout), new RegExp(`hello-from-${hostName}`));
      const exec = await hosted(['exec', 'hello', '--', 'sh', '-c', 'echo exec-$((6*7))']);
      assert.equal(exec.exitCode, 0, String(exec.stderr));
      assert.equal(String(exec.stdout).trim(), 'exec-42');
      return { worker, hosted };
    };
    const e1 = await join1('f1', 'e1', kctlBin);
    const e2 = await join1('f2', 'e2', previous.path);
    await waitFor('kctl cluster list counts each node', 90_000, async () => {
      const x = await list();
      return ['f1', 'f2'].every((n) => {
        const nodes = x.find((y) => y.name === n)?.nodes;
        return nodes?.ready === 1 && nodes.total === 1;
      });
    });

    await keptCredentials(m, t, operator.log);
    await failover(m, t, e1, pods, story);
    await scale(m, t, { e1, pods, story, listed });
    await upgrade(m, t, { previous, e2, status, condition, pods, story });

    // f1 deleted: its pods, Secrets, Service and ConfigMaps go, then its database and role.
    const f1Db = (await pg.sql("select datname from pg_database where datname like 'kctl_default_f1_%'")).trim();
    assert.match(f1Db, /^kctl_default_f1_[0-9a-f]{8}$/);
    assert.equal((await c.kubectl(['delete', 'kc', 'f1', '--wait=false'])).exitCode, 0);
    await waitFor('f1 and what it owned are gone', 180_000, async () => {
      const left = await c.kubectl(['get', 'deploy,pod,svc,cm,secret,pdb', '-l', 'kctl.dev/cluster=f1', '-o', 'name']);
      return left.exitCode === 0 && String(left.stdout).trim() === '' && (await listed('f1')) === undefined;
    });
    assert.equal((await pg.sql(`select datname from pg_database where datname = '${f1Db}'`)).trim(), '');
    assert.equal((await pg.sql(`select rolname from pg_roles where rolname = '${f1Db}'`)).trim(), '');
    // The others go on.
    assert.deepEqual(
      (await list()).map((x) => `${x.name} ${x.ready}`),
      ['a1 True', 'f2 True'],
    );
  },
);

/** a1's kept credentials: a Deployment on the management cluster lists a1's ConfigMaps with them; a write is forbidden. */
async function keptCredentials(m: ManagementLab, t: TestContext, operatorLog: () => string): Promise<void> {
  const { c, dir, out } = m;
  const a1 = await hostedKubectl(m, 'a1');
  assert.equal((await a1(['create', 'configmap', 'hello', '--from-literal=where=a1'])).exitCode, 0);
  const bound = await a1([
    'create',
    'rolebinding',
    'watcher',
    '--clusterrole=view',
    '--serviceaccount=default:watcher',
  ]);
  assert.equal(bound.exitCode, 0, String(bound.stderr));
  await waitFor(
    'the kept credentials Secret',
    90_000,
    async () => (await c.kubectl(['get', 'secret', 'a1-watcher'])).exitCode === 0,
  );
  const readerLog = await startTenantReader(c, 'a1-watcher');
  await waitFor(
    "the Deployment lists a1's ConfigMaps",
    180_000,
    async () => /configmap\/hello/.test(await readerLog()),
    readerLog,
  );
  const creds = await c.kubectl(['get', 'secret', 'a1-watcher', '-o', 'jsonpath={.data.kubeconfig}']);
  const watcherConf = join(dir, 'watcher.conf');
  await writeFile(watcherConf, Buffer.from(String(creds.stdout), 'base64'), { mode: 0o600 });
  const endpoint = String((await c.kubectl(['get', 'kc', 'a1', '-o', 'jsonpath={.status.endpoint}'])).stdout);
  const denied = await out.run(
    join(c.dataDir, 'bin', 'current', 'kubectl'),
    ['--kubeconfig', watcherConf, '--server', endpoint, '--request-timeout=20s', 'create', 'configmap', 'nope'],
    { timeout: 60_000 },
  );
  assert.notEqual(denied.exitCode, 0);
  assert.match(String(denied.stderr), /forbidden/i);
  assert.equal((await c.kubectl(['delete', 'deploy', 'tenant-reader', '--wait=false'])).exitCode, 0);

  // The entry taken out of the spec: its Secret goes, and the token it held is refused at once
  // (bound to an anchor in the tenant that goes first), not only when it expires.
  const list = () =>
    out.run(
      join(c.dataDir, 'bin', 'current', 'kubectl'),
      ['--kubeconfig', watcherConf, '--server', endpoint, '--request-timeout=20s', 'get', 'configmaps'],
      { timeout: 60_000 },
    );
  assert.equal((await list()).exitCode, 0, 'the kept token does not work before its entry goes');
  assert.equal(
    (await c.kubectl(['patch', 'kc', 'a1', '--type=json', '-p', '[{"op":"remove","path":"/spec/serviceAccounts"}]']))
      .exitCode,
    0,
  );
  await waitFor(
    'the kept credentials Secret is gone',
    90_000,
    async () => String((await c.kubectl(['get', 'secret', 'a1-watcher', '-o', 'name'])).stderr).includes('NotFound'),
    async () => String((await c.kubectl(['get', 'kc', 'a1', '-o', 'yaml'])).stdout) + operatorLog(),
  );
  const dropped = Date.now();
  // kube-apiserver keeps a token's review for up to 10 s.
  await waitFor('the kept token refused', 30_000, async () => /Unauthorized/i.test(String((await list()).stderr)));
  t.diagnostic(
    `a Deployment listed the api-only tenant with the kept credentials; the token was refused ${((Date.now() - dropped) / 1000).toFixed(1)} s after its entry's Secret went`,
  );
}

/** f1's control-plane pod killed on a cordoned node: the API is back from the other node, e1 stays Ready. */
async function failover(
  m: ManagementLab,
  t: TestContext,
  e1: { worker: Tracked; hosted: Kubectl },
  pods: (name: string) => Promise<PodItem[]>,
  story: (name: string) => Promise<string>,
): Promise<void> {
  const { c } = m;
  const readySince = async () =>
    String((await e1.hosted(['get', 'node', 'e1', '-o', `jsonpath=${READY_SINCE}`])).stdout);
  const before = await readySince();
  assert.ok(before, 'e1 has no Ready condition');
  const [old] = await pods('f1');
  assert.equal(old!.status.containerStatuses?.[0]?.restartCount, 0, 'f1 restarted before the failover');
  const from = old!.spec.nodeName!;
  assert.equal((await c.kubectl(['cordon', from])).exitCode, 0);
  const killed = Date.now();
  assert.equal(
    (await c.kubectl(['delete', 'pod', old!.metadata.name, '--grace-period=0', '--force', '--wait=false'])).exitCode,
    0,
  );
  const probe = await hostedKubectl(m, 'f1', 3);
  await waitFor(
    'the API of f1 answers from a pod on the other node',
    120_000,
    async () =>
      (await pods('f1')).some(
        (p) => p.spec.nodeName !== from && !p.metadata.deletionTimestamp && p.status.containerStatuses?.[0]?.ready,
      ) && (await probe(['get', '--raw', '/readyz'])).exitCode === 0,
    () => story('f1'),
  );
  t.diagnostic(
    `f1's API back ${((Date.now() - killed) / 1000).toFixed(1)} s after its pod was killed on a cordoned node`,
  );
  assert.ok(await nodeReady(e1.hosted, 'e1'), 'e1 is not Ready after the failover');
  assert.equal(await readySince(), before, "e1's Ready condition changed during the failover");
  await waitFor(
    'exec through the tunnel to the new server',
    120_000,
    async () => String((await probe(['exec', 'hello', '--', 'echo', 'back'])).stdout).trim() === 'back',
    e1.worker.log,
  );
  assert.equal((await c.kubectl(['uncordon', from])).exitCode, 0);
}

/**
 * f1 scaled to two control-plane pods: on two nodes, each with a lease of its own in the tenant,
 * e1's agent held by both, and exec through each pod's own kube-apiserver; then back to one, whose
 * lease alone remains.
 */
async function scale(
  m: ManagementLab,
  t: TestContext,
  o: {
    e1: { worker: Tracked; hosted: Kubectl };
    pods: (name: string) => Promise<PodItem[]>;
    story: (name: string) => Promise<string>;
    listed: (name: string) => Promise<Listed | undefined>;
  },
): Promise<void> {
  const { c } = m;
  const replicas = (n: number) =>
    c.kubectl(['patch', 'kc', 'f1', '--type=merge', '-p', JSON.stringify({ spec: { replicas: n } })]);
  /** The tenant's live controller leases: name, and the agents its konnectivity server holds. */
  const leases = async () => {
    const r = await o.e1.hosted(['get', 'leases', '-n', 'kube-system', '-l', 'kctl.dev/controller=true', '-o', 'json']);
    const items = (
      JSON.parse(String(r.stdout) || '{"items":[]}') as {
        items: { metadata: { name: string; annotations?: Record<string, string> } }[];
      }
    ).items;
    return items.map((l) => ({
      name: l.metadata.name,
      agents: (l.metadata.annotations?.['kctl.dev/agents'] ?? '').split(',').filter(Boolean),
    }));
  };
  const serving = async () => (await o.pods('f1')).filter((p) => !p.metadata.deletionTimestamp);
  const started = Date.now();
  assert.equal((await replicas(2)).exitCode, 0);
  await waitFor(
    "f1's two pods ready, each holding e1's agent",
    300_000,
    async () => {
      const x = await o.listed('f1');
      const held = await leases();
      return (
        x?.pods?.ready === 2 &&
        (await serving()).length === 2 &&
        held.length === 2 &&
        held.every((l) => l.agents.includes('system:node:e1'))
      );
    },
    async () => JSON.stringify(await leases()) + (await o.story('f1')),
  );
  t.diagnostic(
    `f1 scaled to two control-plane pods in ${((Date.now() - started) / 1000).toFixed(1)} s; both hold e1's agent`,
  );
  const two = await serving();
  assert.notEqual(two[0]!.spec.nodeName, two[1]!.spec.nodeName, 'both control-plane pods on one node');
  // Each lease is its pod's: named after it.
  assert.deepEqual(
    (await leases()).map((l) => l.name).sort(),
    two.map((p) => `kctl-controller-${p.metadata.name}`).sort(),
  );
  // Through each pod's own kube-apiserver (not the Service, which picks one): its tunnel reaches e1.
  const port = String(
    (await c.kubectl(['get', 'svc', 'f1', '-o', 'jsonpath={.spec.ports[?(@.name=="api")].nodePort}'])).stdout,
  );
  for (const p of two) {
    const r = await c.kubectl([
      'exec',
      p.metadata.name,
      '--',
      'kctl',
      'kubectl',
      '--server',
      `https://127.0.0.1:${port}`,
      'exec',
      'hello',
      '--',
      'echo',
      `via-${p.metadata.name}`,
    ]);
    assert.equal(r.exitCode, 0, String(r.stderr));
    assert.equal(String(r.stdout).trim(), `via-${p.metadata.name}`);
  }

  // Back to one: the pod that goes takes its lease with it, and the API through the Service stays
  // up while it goes (requests all the while, none fails).
  const probe = await hostedKubectl(m, 'f1', 10);
  const failed: string[] = [];
  let requests = 0;
  let probing = true;
  const prober = (async () => {
    while (probing) {
      const r = await probe(['get', '--raw', '/version']);
      requests++;
      if (r.exitCode !== 0) failed.push(String(r.stderr).trim());
    }
  })();
  assert.equal((await replicas(1)).exitCode, 0);
  await waitFor(
    'f1 back to one pod and one lease',
    180_000,
    async () =>
      (await o.pods('f1')).length === 1 && (await leases()).length === 1 && (await o.listed('f1'))?.pods?.wanted === 1,
    async () => JSON.stringify(await leases()) + (await o.story('f1')),
  );
  probing = false;
  await prober;
  assert.deepEqual(failed, [], `requests through the Service failed while a pod went (${requests} made)`);
  t.diagnostic(`${requests} requests through the Service while the second pod went: none failed`);
  const [left] = await serving();
  assert.deepEqual(
    (await leases()).map((l) => l.name),
    [`kctl-controller-${left!.metadata.name}`],
  );
  await waitFor(
    'exec through the one pod left',
    60_000,
    async () => String((await o.e1.hosted(['exec', 'hello', '--', 'echo', 'one'])).stdout).trim() === 'one',
    o.e1.worker.log,
  );
}

/** f2 from the previous kctl to this one by its version; e2 stays Ready, its pod runs on; a downgrade is refused. */
async function upgrade(
  m: ManagementLab,
  t: TestContext,
  o: {
    previous: { version: string };
    e2: { worker: Tracked; hosted: Kubectl };
    status: (name: string) => Promise<{ conditions?: Condition[]; version?: string; kubernetesVersion?: string }>;
    condition: (name: string, type: string) => Promise<Condition | undefined>;
    pods: (name: string) => Promise<PodItem[]>;
    story: (name: string) => Promise<string>;
  },
): Promise<void> {
  const { c } = m;
  const { hosted } = o.e2;
  const serverVersion = async () =>
    (
      JSON.parse(String((await hosted(['version', '-o', 'json'])).stdout) || '{}') as {
        serverVersion?: { gitVersion: string };
      }
    ).serverVersion?.gitVersion;
  const before = await serverVersion();
  assert.ok(before, 'f2 gave no version');
  // The status names the Kubernetes it runs: what a roll to this operator's own version is checked against.
  assert.equal(`v${(await o.status('f2')).kubernetesVersion}`, before);
  assert.equal((await hosted(['create', 'configmap', 'kept', '--from-literal=from=previous'])).exitCode, 0);
  const ca = String((await c.kubectl(['get', 'secret', 'f2-pki', '-o', 'jsonpath={.data.ca\\.crt}'])).stdout);
  const readySince = async () => String((await hosted(['get', 'node', 'e2', '-o', `jsonpath=${READY_SINCE}`])).stdout);
  const readyBefore = await readySince();
  const container = async () =>
    String((await hosted(['get', 'pod', 'hello', '-o', 'jsonpath={.status.containerStatuses[0].containerID}'])).stdout);
  const containerBefore = await container();

  const patch = (version: string) =>
    c.kubectl(['patch', 'kc', 'f2', '--type=merge', '-p', JSON.stringify({ spec: { version } })]);
  const started = Date.now();
  assert.equal((await patch(KCTL_VERSION)).exitCode, 0);
  await waitFor(
    'f2 rolled to this kctl',
    300_000,
    async () => {
      const s = await o.status('f2');
      return s.version === KCTL_VERSION && s.conditions?.find((x) => x.type === 'Progressing')?.reason === 'Rolled';
    },
    () => o.story('f2'),
  );
  t.diagnostic(
    `f2 rolled from ${o.previous.version} to ${KCTL_VERSION} in ${((Date.now() - started) / 1000).toFixed(1)} s`,
  );
  const serving = (await o.pods('f2'))
    .filter((p) => !p.metadata.deletionTimestamp)
    .map((p) => p.spec.containers[0]!.image);
  assert.deepEqual(serving, [kctlImageOf(KCTL_VERSION)]);
  await waitFor('f2 answers after the roll', 90_000, async () => (await serverVersion()) !== undefined);
  assert.notEqual(await serverVersion(), before, `f2 still runs ${before}`);
  assert.equal(`v${(await o.status('f2')).kubernetesVersion}`, await serverVersion());
  assert.equal(String((await hosted(['get', 'configmap', 'kept', '-o', 'jsonpath={.data.from}'])).stdout), 'previous');
  assert.equal(String((await c.kubectl(['get', 'secret', 'f2-pki', '-o', 'jsonpath={.data.ca\\.crt}'])).stdout), ca);
  // The node of the older kctl stays: Ready throughout, its pod's container the same, exec through the new server.
  await waitFor('e2 Ready under the new control plane', 120_000, () => nodeReady(hosted, 'e2'), o.e2.worker.log);
  assert.equal(await readySince(), readyBefore, "e2's Ready condition changed during the upgrade");
  assert.equal(await container(), containerBefore, "e2's pod was restarted by the upgrade");
  await waitFor(
    'exec on e2 through the upgraded server',
    120_000,
    async () => String((await hosted(['exec', 'hello', '--', 'echo', 'after'])).stdout).trim() === 'after',
    o.e2.worker.log,
  );

  // Back to the previous version: refused, the pods left as they were.
  assert.equal((await patch(o.previous.version)).exitCode, 0);
  await waitFor(
    'the downgrade is refused',
    60_000,
    async () => (await o.condition('f2', 'Degraded'))?.reason === 'DowngradeRefused',
  );
  const still = await c.kubectl(['get', 'deploy', 'f2', '-o', 'jsonpath={.spec.template.spec.containers[0].image}']);
  assert.equal(String(still.stdout), kctlImageOf(KCTL_VERSION));
  assert.equal((await o.condition('f2', 'Ready'))?.status, 'True');
}
