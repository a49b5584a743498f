// Controllers joining a running cluster, with the real parts: controller lab hosts on etcd and
// two workers that joined through the first, every controller host cut off from the workers.
// The second and third controllers join with a controller token (shared CAs and keys from the
// join endpoint, etcd learner promoted when caught up); state written through one is read through
// another; each worker's agent holds a stream to every live controller (their leases), so logs,
// exec and port-forward to pods on both workers work through each, every server announces the
// live count, and every controller's status shows each agent on all of them; bad tokens, a second
// join with a single-use token and a join without etcd quorum are refused with one line and
// nothing written, and the cluster keeps only the hash of a controller token. The first controller's
// host then loses all its processes: through the survivors logs, exec and port-forward work
// within seconds, a new pod is scheduled, no node changes its Ready condition (their API
// balancers moved kubelet), the server count drops to 2; the controller comes back as the same
// etcd member and the agents reconnect on their own. A fourth controller joins and leaves while
// exec and logs run in a loop through the others: agents take it and drop it, no request fails.
// A controller whose host is gone is removed from etcd by address on a live one; a controller
// that left etcd refuses to start again.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { test, type TestContext } from 'node:test';
import type { EtcdMember } from '../../../src/etcd/members.ts';
import { decodeToken, encodeToken } from '../../../src/join/token.ts';
import { selfSignedCert } from '../../helpers.ts';
import type { WorkerStatusReport } from '../../../src/worker/index.ts';
import { killControllerProcesses, nodeReady, runPinnedPod, startLabWorker, type Tracked } from '../lab/cluster.ts';
import { HaLab, type LabCtl } from '../lab/ha-lab.ts';
import { startLab } from '../lab/lab-test.ts';
import { waitFor } from '../../wait.ts';

// 6-8 minutes here beside another test; beside the main run on a loaded CI machine it ran out of
// ten, and beside the tenants e2e it took 13.5 (2026-11-28).
test(
  'controllers join by token and leave; losing one is invisible to the nodes; bad tokens and no quorum refused; a member that left stays out',
  { timeout: 25 * 60_000 },
  async (t: TestContext) => {
    const { lab, dir, kctlBin } = await startLab(t, 'ha', ['c1', 'c2', 'c3', 'c4', 'w1', 'w2'], {
      dir: 'kctl-ha-',
      workers: ['w1', 'w2'],
    });
    const workers = [lab.host('w1'), lab.host('w2')];
    const ha = new HaLab(kctlBin, dir);
    const ctls: LabCtl[] = [];
    const workerProcs: Tracked[] = [];
    for (const name of ['c1', 'c2', 'c3', 'c4']) {
      const host = lab.host(name);
      ctls.push(
        await ha.controller(
          host,
          `  api: { address: ${host.ip} }\n  storage: { type: etcd, etcd: { memberName: ${name} } }\n`,
        ),
      );
    }
    const [c1, c2, c3, c4] = ctls as [LabCtl, LabCtl, LabCtl, LabCtl];
    // Where the time goes, in the report even when the test runs out of it.
    const began = Date.now();
    const phase = (what: string) => t.diagnostic(`${((Date.now() - began) / 1000).toFixed(0)} s: ${what}`);
    const run = (c: LabCtl, args: string[]) => ha.run(c, args);
    const members = async (c: LabCtl): Promise<EtcdMember[]> => {
      const r = await run(c, ['etcd', 'member-list', '-o', 'json']);
      assert.equal(r.exitCode, 0, String(r.stderr));
      return JSON.parse(String(r.stdout)) as EtcdMember[];
    };
    const voters = async (c: LabCtl, names: string[]) =>
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

    await ha.start(c1);
    // Two workers, each cut off from every controller host, join through c1 and run a web pod each.
    for (const w of workers) await lab.isolate(w, c1.host, c2.host, c3.host, c4.host);
    const wtoken = String((await run(c1, ['token', 'create', '--role', 'worker'])).stdout).trim();
    for (const w of workers) workerProcs.push(startLabWorker(ha.kctlBin, w, dir, wtoken));
    const kubectl1 = (args: string[], input?: string) => ha.kubectl(c1, args, input);
    for (const [i, w] of workers.entries()) {
      await waitFor(`${w.name} Ready`, 300_000, () => nodeReady(kubectl1, w.name), workerProcs[i]!.log);
      await runPinnedPod(kubectl1, `web-${w.name}`, w.name, 'started', true);
    }
    phase('c1 up, both workers Ready with a pod each');
    const agents = workers.map((w) => w.name);
    await ha.agentsFollow([c1], agents);
    /** Logs, exec and port-forward through controller `c` reach the web pod on every worker. */
    const reachPods = async (c: LabCtl) => {
      for (const w of workers) {
        const pod = `web-${w.name}`;
        const logs = await ha.kubectl(c, ['logs', pod]);
        assert.match(String(logs.stdout), /started/, `logs of ${pod} through ${c.host.name}: ${String(logs.stderr)}`);
        const exec = await ha.kubectl(c, ['exec', pod, '--', 'cat', '/www/index.html']);
        assert.equal(String(exec.stdout).trim(), pod, `exec in ${pod} through ${c.host.name}: ${String(exec.stderr)}`);
        assert.equal(await ha.portForward(c, pod, 8080), pod, `port-forward to ${pod} through ${c.host.name}`);
      }
    };

    const created = await run(c1, ['token', 'create', '--role', 'controller', '--expiry', '1h']);
    assert.equal(created.exitCode, 0, String(created.stderr));
    const ctoken = String(created.stdout).trim();
    const ctokenFile = await ha.tokenFile('controller.token', ctoken);

    // Bad input, each refused with one line and nothing written.
    await ha.refused(
      c2,
      await ha.tokenFile('worker.token', wtoken),
      /this is a worker join token: use it with `kctl worker`/,
    );
    const asWorker = await c2.host.run(ha.kctlBin, [
      'worker',
      '--token',
      ctoken,
      '--data-dir',
      join(dir, 'w-data'),
      '--run-dir',
      join(dir, 'w-run'),
    ]);
    assert.match(
      String(asWorker.stderr).trim(),
      /^kctl: this is a controller join token: use it with `kctl controller --token-file`/,
    );
    assert.equal(existsSync(join(dir, 'w-data')), false);
    const expired = String(
      (await run(c1, ['token', 'create', '--role', 'controller', '--expiry', '1s'])).stdout,
    ).trim();
    await new Promise((r) => setTimeout(r, 2500));
    await ha.refused(
      c2,
      await ha.tokenFile('expired.token', expired),
      /refused the join: the join token was rejected \(expired, invalidated or never issued\)/,
    );
    const otherCa = encodeToken({
      ...decodeToken(ctoken),
      caPem: selfSignedCert(dir, 'other-ca', { cn: 'other-ca', ca: true }).pem,
    });
    await ha.refused(c2, await ha.tokenFile('other-ca.token', otherCa), /is not signed by the CA in the join token/);

    phase('bad tokens refused');
    // c2 joins: an etcd learner, promoted; c2 serves the same cluster, and both agents find it.
    await ha.start(c2, ctokenFile);
    await voters(c1, ['c1', 'c2']);
    await ha.agentsFollow([c1, c2], agents);
    for (const f of ['ca.key', 'sa.key', 'etcd/ca.key', 'front-proxy-ca.key']) {
      assert.equal(
        await readFile(join(c2.dataDir, 'pki', f), 'utf8'),
        await readFile(join(c1.dataDir, 'pki', f), 'utf8'),
        `${f} differs`,
      );
      assert.equal((await stat(join(c2.dataDir, 'pki', f))).mode & 0o777, 0o600, f);
    }
    assert.ok(!c2.proc!.saw('BEGIN EC PRIVATE KEY') && !c2.proc!.saw('BEGIN PRIVATE KEY'), 'a key reached the log');

    // The token was single-use: a second join with it is refused; the cluster holds only its hash.
    await ha.refused(
      c3,
      ctokenFile,
      /refused the join: the join token is used up \(1 join\); create a new one with: kctl token create --role controller$/,
    );
    const used = await ha.storedControllerToken(c1, ctoken);
    assert.deepEqual([used?.role, used?.usesLeft], ['controller', 0]);
    const secret = decodeToken(ctoken).bootstrapToken.split('.')[1]!;
    assert.ok(!c1.proc!.saw(secret) && !c2.proc!.saw(secret), 'the token secret reached a log');
    // c3 and c4 join with one token of two uses.
    const created2 = await run(c1, ['token', 'create', '--role', 'controller', '--uses', '2']);
    assert.equal(created2.exitCode, 0, String(created2.stderr));
    const ctoken2File = await ha.tokenFile('controller2.token', String(created2.stdout).trim());

    // No quorum (c2 stopped: 1 of 2 members up): c3 is refused, nothing written.
    await ha.stop(c2);
    await ha.refused(
      c3,
      ctoken2File,
      /refused the join: .*(etcd cannot change its membership|cannot check the join token)/,
    );
    // c2 restarts without a token and the cluster is whole again.
    await ha.start(c2);
    await voters(c1, ['c1', 'c2']);

    phase('c2 joined, stopped, back');
    // c3 joins; what c1 writes, c3 reads.
    await ha.start(c3, ctoken2File);
    await voters(c2, ['c1', 'c2', 'c3']);
    assert.equal((await run(c1, ['kubectl', 'create', 'configmap', 'ha-check', '--from-literal=from=c1'])).exitCode, 0);
    const read = await run(c3, ['kubectl', 'get', 'configmap', 'ha-check', '-o', 'jsonpath={.data.from}']);
    assert.equal(String(read.stdout), 'c1', String(read.stderr));
    // Both agents hold all three: logs, exec and port-forward through every controller reach both workers.
    await ha.agentsFollow([c1, c2, c3], agents);
    for (const c of [c1, c2, c3]) await reachPods(c);
    const table = String((await run(c3, ['etcd', 'member-list'])).stdout);
    assert.match(table, /^c3\s+\d+\s+https:\/\/\S+:2380\s+voter\s+\(this controller\)$/m, table);
    const text = String((await run(c3, ['status'])).stdout);
    assert.match(text, /^Storage: etcd, 3 member\(s\)$/m, text);
    assert.match(
      text,
      /^ {2}system:node:w2 {2}3\/3 {2}kctl-controller-\S+, kctl-controller-\S+, kctl-controller-\S+$/m,
      text,
    );

    // Each worker's API balancer has all three API servers, healthy.
    const balancer = async (w: (typeof workers)[number]) => {
      const r = await w.run(ha.kctlBin, ['status', '-o', 'json', '--run-dir', join(dir, `${w.name}-run`)]);
      return (JSON.parse(String(r.stdout)) as WorkerStatusReport).apiBalancer?.upstreams ?? [];
    };
    for (const w of workers)
      await waitFor(`three healthy API servers behind ${w.name}'s balancer`, 30_000, async () => {
        const u = await balancer(w);
        return u.length === 3 && u.every((x) => x.healthy);
      });

    phase('c3 joined, pods reached through all three');
    // c1's host loses all its processes at once (kctl and every child it supervises).
    const readySince = async (c: LabCtl) => {
      const r = await run(c, [
        'kubectl',
        'get',
        'nodes',
        '-o',
        'jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].lastTransitionTime} {end}',
      ]);
      return String(r.stdout).trim();
    };
    const readyBefore = await readySince(c2);
    // Within 30 s, through the survivors: exec reaches the pod on w1 ...
    const { killedAt: killed, execAfterS } = await ha.loseController(c1, c2, 'web-w1');
    t.diagnostic(`first kubectl exec through a survivor ${execAfterS.toFixed(1)} s after c1 was killed`);
    // ... and logs, exec and port-forward through both survivors to both workers ...
    for (const c of [c2, c3]) await reachPods(c);
    t.diagnostic(
      `logs, exec and port-forward to both workers through both survivors ${((Date.now() - killed) / 1000).toFixed(1)} s after c1 was killed`,
    );
    // ... a new pod is scheduled (scheduler leadership moved) and starts ...
    await ha.runNewPod(c2, 'after-loss', /^w[12]$/);
    // ... the survivors announce two servers once c1's lease has run out, and no node changed its Ready condition.
    await ha.agentsFollow([c2, c3], agents);
    assert.equal(await readySince(c2), readyBefore, 'a node changed its Ready condition while a controller was lost');
    for (const w of workers) assert.ok(await nodeReady((args) => ha.kubectl(c2, args), w.name));

    phase('c1 lost, the survivors serve');
    // c1 comes back on its data dir: same etcd member, agents reconnect on their own, three servers again.
    await ha.start(c1);
    await voters(c2, ['c1', 'c2', 'c3']);
    await ha.agentsFollow([c1, c2, c3], agents);

    phase('c1 back');
    // A fourth controller joins and leaves while exec and logs run in a loop through c2 and c3.
    const traffic = { ok: 0, failed: [] as string[], stop: false };
    const loop = async (c: LabCtl, args: (pod: string) => string[], expect: RegExp) => {
      for (let i = 0; !traffic.stop; i++) {
        const pod = `web-${workers[i % 2]!.name}`;
        const r = await ha.kubectl(c, args(pod));
        if (r.exitCode === 0 && expect.test(String(r.stdout))) traffic.ok++;
        else traffic.failed.push(`${c.host.name} ${args(pod).join(' ')}: ${String(r.stderr).trim()}`);
        // A user's pace, not a tight loop: two loops without a pause kept both CPUs busy, and the
        // controller joining beside them took the test past its time.
        await sleep(500);
      }
    };
    const loops = [
      loop(c2, (pod) => ['exec', pod, '--', 'cat', '/www/index.html'], /^web-w\d$/m),
      loop(c3, (pod) => ['logs', pod], /started/),
    ];
    await ha.start(c4, ctoken2File);
    const c4Ready = Date.now();
    await voters(c1, ['c1', 'c2', 'c3', 'c4']);
    await ha.agentsFollow([c1, c2, c3, c4], agents, 30_000);
    t.diagnostic(
      `both agents on the fourth controller ${((Date.now() - c4Ready) / 1000).toFixed(1)} s after it was ready`,
    );
    await reachPods(c4);
    const left = await run(c4, ['etcd', 'leave']);
    assert.equal(left.exitCode, 0, String(left.stderr));
    await voters(c1, ['c1', 'c2', 'c3']);
    await ha.stop(c4);
    // Its lease went with it: the others announce three servers again, the agents dropped it.
    await ha.agentsFollow([c1, c2, c3], agents);
    traffic.stop = true;
    await Promise.all(loops);
    assert.deepEqual(traffic.failed, [], 'a request through another controller failed while the fourth joined or left');
    assert.ok(traffic.ok >= 10, `only ${traffic.ok} requests ran while the fourth controller joined and left`);
    t.diagnostic(`${traffic.ok} exec/logs requests through c2 and c3 while c4 joined and left, none failed`);
    assert.equal(
      await readySince(c1),
      readyBefore,
      'a node changed its Ready condition while a controller joined or left',
    );
    await reachPods(c1);

    phase('c4 joined and left');
    // c3's host is gone for good: a live controller removes its member by address.
    killControllerProcesses(await ha.status(c3));
    await c3.proc!.exited;
    const removed = await run(c1, ['etcd', 'leave', '--peer-address', c3.host.ip]);
    assert.match(
      String(removed.stdout),
      /^removed etcd member c3 \(\d+, https:\/\/\S+:2380\)$/m,
      String(removed.stderr),
    );
    await voters(c2, ['c1', 'c2']);

    // The controller that left refuses to start on that data dir again.
    const again = await c4.host.run(ha.kctlBin, [
      'controller',
      '--config',
      c4.config,
      '--data-dir',
      c4.dataDir,
      '--run-dir',
      c4.runDir,
    ]);
    assert.notEqual(again.exitCode, 0);
    assert.match(
      String(again.stderr).trim(),
      /^kctl: this controller left the etcd cluster \(kctl etcd leave\) and must not start on \S+ again; run kctl reset/,
    );
  },
);
