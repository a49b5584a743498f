// Controllers joining a running cluster, with the real parts: three controller lab hosts on
// etcd and a worker that joined through the first. The second and third controllers join with a
// controller token (shared CAs and keys from the join endpoint, etcd learner promoted when
// caught up); state written through one controller is read through another; the worker's
// agent holds a stream to every live controller (their leases), so logs work through each,
// and every server announces the live count; bad tokens and a join without etcd quorum are
// refused with one line and nothing written. The first controller's host then loses all its
// processes: through the survivors exec and logs work within seconds, a new pod is scheduled,
// the node never goes NotReady (its API balancer moved kubelet), the server count drops to 2;
// the controller comes back as the same etcd member and the agents reconnect on their own.
// Finally a controller that left etcd refuses to start again.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import type { EtcdMember } from '../../src/etcd/members.ts';
import { decodeToken, encodeToken } from '../../src/join/token.ts';
import { selfSignedCert } from '../helpers.ts';
import type { ControllerStatusReport } from '../../src/controller/status.ts';
import type { WorkerStatusReport } from '../../src/worker/index.ts';
import { cleanupWorkerHost, killControllerProcesses, nodeReady, runPinnedPod, startLabWorker, track, type Tracked } from './cluster.ts';
import { requireKctl } from './kctl.ts';
import { createLab, type LabHost } from './lab.ts';
import { waitFor } from './wait.ts';

interface Ctl {
  host: LabHost;
  dataDir: string;
  runDir: string;
  config: string;
  proc?: Tracked;
}

test('controllers join by token; losing one is invisible to the node; bad tokens and no quorum refused; a member that left stays out', async (t: TestContext) => {
  const lab = await createLab('ha', ['c1', 'c2', 'c3', 'w1'], { t });
  const w1 = lab.host('w1');
  const dir = await mkdtemp(join(tmpdir(), 'kctl-ha-'));
  const kctlBin = requireKctl();
  const ctls: Ctl[] = [];
  let worker: Tracked | undefined;
  t.after(async () => {
    for (const c of ctls) c.proc?.child.kill('SIGKILL');
    worker?.child.kill('SIGKILL');
    await cleanupWorkerHost(join(dir, 'w1-data'), join(dir, 'w1-run'), 'w1');
    await rm(dir, { recursive: true, force: true });
  });
  for (const name of ['c1', 'c2', 'c3']) {
    const host = lab.host(name);
    const config = join(dir, `${name}.yaml`);
    await writeFile(config, `spec:\n  api: { address: ${host.ip} }\n  storage: { type: etcd, etcd: { memberName: ${name} } }\n`);
    ctls.push({ host, dataDir: join(dir, `${name}-data`), runDir: join(dir, `${name}-run`), config });
  }
  const [c1, c2, c3] = ctls as [Ctl, Ctl, Ctl];
  const run = (c: Ctl, args: string[]) => c.host.run(kctlBin, ['--data-dir', c.dataDir, '--run-dir', c.runDir, ...args], { timeout: 120_000 });
  const start = async (c: Ctl, tokenFile?: string) => {
    c.proc = track(
      c.host.spawn(kctlBin, [
        'controller',
        '--config',
        c.config,
        '--data-dir',
        c.dataDir,
        '--run-dir',
        c.runDir,
        ...(tokenFile ? ['--token-file', tokenFile] : []),
      ]),
    );
    await waitFor(
      `${c.host.name} ready`,
      240_000,
      async () => {
        if (c.proc!.child.exitCode !== null) throw new Error(`${c.host.name} exited`);
        return c.proc!.saw('"msg":"controller ready"');
      },
      c.proc.log,
    );
  };
  const stop = async (c: Ctl) => {
    c.proc!.child.kill('SIGTERM');
    assert.equal(await c.proc!.exited, 0, c.proc!.log());
  };
  const members = async (c: Ctl): Promise<EtcdMember[]> => {
    const r = await run(c, ['etcd', 'member-list', '-o', 'json']);
    assert.equal(r.exitCode, 0, String(r.stderr));
    return JSON.parse(String(r.stdout)) as EtcdMember[];
  };
  const voters = async (c: Ctl, names: string[]) =>
    waitFor(`etcd voters ${names.join(', ')}`, 120_000, async () => {
      const m = await members(c);
      return (
        m.length === names.length &&
        m.every((x) => !x.isLearner) &&
        m
          .map((x) => x.name)
          .sort()
          .join() === names.join()
      );
    });
  const tokenFile = async (name: string, text: string) => {
    const f = join(dir, name);
    await writeFile(f, text, { mode: 0o600 });
    return f;
  };
  /** A join that must fail with one line matching `expect` and leave the data dir unwritten. */
  const refused = async (c: Ctl, file: string, expect: RegExp) => {
    const r = await c.host.run(kctlBin, ['controller', '--config', c.config, '--data-dir', c.dataDir, '--run-dir', c.runDir, '--token-file', file], {
      timeout: 120_000,
    });
    assert.notEqual(r.exitCode, 0, `${c.host.name} joined with ${file}`);
    const lines = String(r.stderr).trim().split('\n');
    assert.equal(lines.length, 1, String(r.stderr));
    assert.match(lines[0]!, expect);
    assert.equal(existsSync(c.dataDir), false, `a refused join wrote ${c.dataDir}`);
  };

  await start(c1);
  // A worker, isolated from every controller host, joins through c1 and runs a pod.
  await lab.isolate(w1, c1.host, c2.host, c3.host);
  const kubectl1 = (args: string[], input?: string) =>
    c1.host.run(kctlBin, ['--data-dir', c1.dataDir, 'kubectl', ...args], { input, timeout: 60_000 });
  worker = startLabWorker(kctlBin, w1, dir, String((await run(c1, ['token', 'create', '--role', 'worker'])).stdout).trim());
  await waitFor('w1 Ready', 300_000, () => nodeReady(kubectl1, 'w1'), worker.log);
  await runPinnedPod(kubectl1, 'talker', 'w1', 'started');
  /** The konnectivity view of controller `c`: its server count and the agents it holds. */
  const tunnel = async (c: Ctl) => {
    const r = await run(c, ['status', '-o', 'json']);
    const report = JSON.parse(String(r.stdout)) as ControllerStatusReport;
    const k = report.konnectivity;
    return { count: k?.serverCount ?? 0, agents: (k?.agents ?? []).map((a) => a.id), live: report.controllers?.length ?? 0 };
  };
  /** Every listed controller holds w1's agent, sees `count` live controllers and announces `count` servers. */
  const agentsFollow = (list: Ctl[], count: number) =>
    waitFor(`w1's agent on ${list.map((c) => c.host.name).join(', ')} with server count ${count}`, 60_000, async () => {
      for (const c of list) {
        const k = await tunnel(c);
        if (k.count !== count || k.live !== count || !k.agents.includes('w1')) return false;
      }
      return true;
    });
  await agentsFollow([c1], 1);

  const created = await run(c1, ['token', 'create', '--role', 'controller', '--expiry', '1h']);
  assert.equal(created.exitCode, 0, String(created.stderr));
  const ctoken = String(created.stdout).trim();
  const ctokenFile = await tokenFile('controller.token', ctoken);

  // Bad input, each refused with one line and nothing written.
  const wtoken = String((await run(c1, ['token', 'create', '--role', 'worker'])).stdout).trim();
  await refused(c2, await tokenFile('worker.token', wtoken), /this is a worker join token: use it with `kctl worker`/);
  const asWorker = await c2.host.run(kctlBin, ['worker', '--token', ctoken, '--data-dir', join(dir, 'w-data'), '--run-dir', join(dir, 'w-run')]);
  assert.match(String(asWorker.stderr).trim(), /^kctl: this is a controller join token: use it with `kctl controller --token-file`/);
  assert.equal(existsSync(join(dir, 'w-data')), false);
  const expired = String((await run(c1, ['token', 'create', '--role', 'controller', '--expiry', '1s'])).stdout).trim();
  await new Promise((r) => setTimeout(r, 2500));
  await refused(
    c2,
    await tokenFile('expired.token', expired),
    /refused the join: the join token was rejected \(expired, invalidated or never issued\)/,
  );
  const otherCa = encodeToken({ ...decodeToken(ctoken), caPem: selfSignedCert(dir, 'other-ca', { cn: 'other-ca', ca: true }).pem });
  await refused(c2, await tokenFile('other-ca.token', otherCa), /is not signed by the CA in the join token/);

  // c2 joins: an etcd learner, promoted; c2 serves the same cluster, and w1's agent finds it.
  await start(c2, ctokenFile);
  await voters(c1, ['c1', 'c2']);
  await agentsFollow([c1, c2], 2);
  for (const f of ['ca.key', 'sa.key', 'etcd/ca.key', 'front-proxy-ca.key']) {
    assert.equal(await readFile(join(c2.dataDir, 'pki', f), 'utf8'), await readFile(join(c1.dataDir, 'pki', f), 'utf8'), `${f} differs`);
    assert.equal((await import('node:fs/promises').then((fs) => fs.stat(join(c2.dataDir, 'pki', f)))).mode & 0o777, 0o600, f);
  }
  assert.ok(!c2.proc!.saw('BEGIN EC PRIVATE KEY') && !c2.proc!.saw('BEGIN PRIVATE KEY'), 'a key reached the log');

  // No quorum (c2 stopped: 1 of 2 members up): c3 is refused, nothing written.
  await stop(c2);
  await refused(c3, ctokenFile, /refused the join: .*(etcd cannot change its membership|cannot check the join token)/);
  // c2 restarts without a token and the cluster is whole again.
  await start(c2);
  await voters(c1, ['c1', 'c2']);

  // c3 joins; what c1 writes, c3 reads.
  await start(c3, ctokenFile);
  await voters(c2, ['c1', 'c2', 'c3']);
  assert.equal((await run(c1, ['kubectl', 'create', 'configmap', 'ha-check', '--from-literal=from=c1'])).exitCode, 0);
  const read = await run(c3, ['kubectl', 'get', 'configmap', 'ha-check', '-o', 'jsonpath={.data.from}']);
  assert.equal(String(read.stdout), 'c1', String(read.stderr));
  // The agent holds all three: logs through every controller reach the pod on w1.
  await agentsFollow([c1, c2, c3], 3);
  for (const c of [c1, c2, c3]) {
    const logs = await run(c, ['kubectl', 'logs', 'talker']);
    assert.match(String(logs.stdout), /started/, `logs through ${c.host.name}: ${String(logs.stderr)}`);
  }
  const table = String((await run(c3, ['etcd', 'member-list'])).stdout);
  assert.match(table, /^c3\s+\d+\s+https:\/\/\S+:2380\s+voter\s+\(this controller\)$/m, table);

  // The worker's API balancer has all three API servers, healthy.
  const balancer = async () => {
    const r = await w1.run(kctlBin, ['status', '-o', 'json', '--run-dir', join(dir, 'w1-run')]);
    return (JSON.parse(String(r.stdout)) as WorkerStatusReport).apiBalancer?.upstreams ?? [];
  };
  await waitFor('three healthy API servers behind the balancer', 30_000, async () => {
    const u = await balancer();
    return u.length === 3 && u.every((x) => x.healthy);
  });

  // c1's host loses all its processes at once (kctl and every child it supervises).
  const readyCondition = async (c: Ctl) =>
    String((await run(c, ['kubectl', 'get', 'node', 'w1', '-o', 'jsonpath={.status.conditions[?(@.type=="Ready")].lastTransitionTime}'])).stdout);
  const readySince = await readyCondition(c2);
  const c1Status = JSON.parse(String((await run(c1, ['status', '-o', 'json'])).stdout)) as ControllerStatusReport;
  const killed = Date.now();
  killControllerProcesses(c1Status);
  await c1.proc!.exited;
  // Within 30 s, through the survivors: exec and logs reach the pod on w1 ...
  const execOk = await waitFor('exec through c2 after losing c1', 30_000, async () => {
    const r = await run(c2, ['kubectl', 'exec', 'talker', '--', 'echo', 'survived']);
    return String(r.stdout).trim() === 'survived' ? Date.now() : undefined;
  });
  t.diagnostic(`first kubectl exec through a survivor ${((execOk - killed) / 1000).toFixed(1)} s after c1 was killed`);
  assert.match(String((await run(c3, ['kubectl', 'logs', 'talker'])).stdout), /started/);
  // ... a new pod is scheduled (scheduler leadership moved) and starts ...
  await run(c2, [
    'kubectl',
    'run',
    'after-loss',
    '--image=docker.io/library/busybox:1.36',
    '--image-pull-policy=Never',
    '--restart=Never',
    '--',
    'sleep',
    '3600',
  ]);
  await waitFor('a new pod scheduled and running after losing c1', 90_000, async () => {
    const r = await run(c2, ['kubectl', 'get', 'pod', 'after-loss', '-o', 'jsonpath={.spec.nodeName}/{.status.phase}']);
    return String(r.stdout) === 'w1/Running';
  });
  // ... the survivors announce two servers once c1's lease has run out, and w1 never went NotReady.
  await agentsFollow([c2, c3], 2);
  assert.equal(await readyCondition(c2), readySince, 'node w1 changed its Ready condition while a controller was lost');
  assert.ok(await nodeReady((args) => run(c2, ['kubectl', ...args]), 'w1'));

  // c1 comes back on its data dir: same etcd member, agents reconnect on their own, three servers again.
  await start(c1);
  await voters(c2, ['c1', 'c2', 'c3']);
  await agentsFollow([c1, c2, c3], 3);

  // c3 leaves etcd, stops, and refuses to start on that data dir again.
  const left = await run(c3, ['etcd', 'leave']);
  assert.equal(left.exitCode, 0, String(left.stderr));
  await voters(c1, ['c1', 'c2']);
  c3.proc!.child.kill('SIGTERM');
  await c3.proc!.exited;
  // Its lease went with it: the others announce two servers, and the agent still serves both.
  await agentsFollow([c1, c2], 2);
  const again = await c3.host.run(kctlBin, ['controller', '--config', c3.config, '--data-dir', c3.dataDir, '--run-dir', c3.runDir]);
  assert.notEqual(again.exitCode, 0);
  assert.match(
    String(again.stderr).trim(),
    /^kctl: this controller left the etcd cluster \(kctl etcd leave\) and must not start on \S+ again; run kctl reset/,
  );
});
