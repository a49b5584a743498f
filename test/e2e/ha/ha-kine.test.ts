// Two controllers on kine sharing one real PostgreSQL (on its own lab host), and a worker cut off
// from both. The second controller joins with a controller token and needs only the keys: the
// state is already in the database. A joiner configured for a local SQLite file or for another
// database is refused with one line and nothing written, and so is a second join with the
// single-use token; the cluster keeps only the token's hash. Both controllers serve the worker's
// pod through its agent; the first controller's host then loses all its processes: through the
// second, exec, logs and port-forward work within seconds, a new pod is scheduled, the node keeps
// its Ready condition, the server count drops to 1; the first comes back and the agent rejoins it.
// Encryption at rest across both: a Secret written through one is read through the other;
// `kctl secrets rotate-key` moves both to a new key while reads through both keep working; rotated
// again while the first is down, the first comes back with only the dropped key, fetches the
// cluster's keys through the second and serves Secrets again.
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { nodeReady, runPinnedPod, startLabWorker } from '../lab/cluster.ts';
import { HaLab, type LabCtl } from '../lab/ha-lab.ts';
import { controllerLeaseName } from '../../../src/kube/controller-leases.ts';
import { startLab } from '../lab/lab-test.ts';
import { startPostgres } from '../lab/postgres.ts';
import { waitFor } from '../../wait.ts';

// 8.4 min in a full run with the long tests beside it (2026-11-27), near the run's 10-minute
// default: its own bound, against a hang only.
test(
  'two controllers on kine and PostgreSQL: a joiner must name the same database; losing one is invisible to the node',
  { timeout: 20 * 60_000 },
  async (t: TestContext) => {
    const { lab, dir, kctlBin } = await startLab(t, 'hakine', ['db', 'c1', 'c2', 'w1'], {
      dir: 'kctl-hakine-',
      workers: ['w1'],
    });
    const w1 = lab.host('w1');
    const ha = new HaLab(kctlBin, dir);
    const pg = await startPostgres(t, 5432, { host: lab.host('db'), trust: lab.subnet });
    const shared = await pg.dataSource('kine');
    const kineSpec = (host: { ip: string }, dataSource?: string) =>
      `  api: { address: ${host.ip} }\n  storage:\n    type: kine\n${dataSource ? `    kine: { dataSource: '${dataSource}' }\n` : ''}`;
    const c1 = await ha.controller(lab.host('c1'), kineSpec(lab.host('c1'), shared));
    await ha.start(c1);
    await lab.isolate(w1, c1.host, lab.host('c2'));
    const worker = startLabWorker(
      ha.kctlBin,
      w1,
      dir,
      String((await ha.run(c1, ['token', 'create', '--role', 'worker'])).stdout).trim(),
    );
    await waitFor('w1 Ready', 300_000, () => nodeReady((args) => ha.kubectl(c1, args), 'w1'), worker.log);
    await runPinnedPod((args, input) => ha.kubectl(c1, args, input), 'web', 'w1', 'started', true);
    await ha.agentsFollow([c1], ['w1']);

    const ctoken = String((await ha.run(c1, ['token', 'create', '--role', 'controller'])).stdout).trim();
    const tokenFile = await ha.tokenFile('controller.token', ctoken);
    // A joiner on its own SQLite file, or on another database of the same server: refused, nothing written.
    const c2host = lab.host('c2');
    await ha.refused(
      await ha.controller(c2host, kineSpec(c2host)),
      tokenFile,
      /joining controller's is a local SQLite file; set spec\.storage\.kine\.dataSource to postgres:\/\/\S+:5432\/kine/,
    );
    await ha.refused(
      await ha.controller(c2host, kineSpec(c2host, await pg.dataSource('other'))),
      tokenFile,
      /the cluster's datastore is postgres:\/\/\S+:5432\/kine but the joining controller's is postgres:\/\/\S+:5432\/other/,
    );
    // On the same database it joins with the keys only: the cluster's objects are already there.
    const c2 = await ha.controller(c2host, kineSpec(c2host, shared));
    await ha.start(c2, tokenFile);
    // The token was single-use: another join with it (a fresh data dir on c2's host) is refused.
    await ha.refused(
      await ha.controller(c2host, kineSpec(c2host, shared), 'c2-again'),
      tokenFile,
      /refused the join: the join token is used up \(1 join\); create a new one with: kctl token create --role controller$/,
    );
    const used = await ha.storedControllerToken(c1, ctoken);
    assert.deepEqual([used?.role, used?.usesLeft], ['controller', 0]);
    const storage = (await ha.status(c2)).storage;
    assert.deepEqual(storage, { type: 'kine', datastore: `postgres://${pg.host}:5432/kine` });
    assert.equal(String((await ha.kubectl(c2, ['get', 'pod', 'web', '-o', 'jsonpath={.spec.nodeName}'])).stdout), 'w1');
    await ha.agentsFollow([c1, c2], ['w1']);
    const reachPod = async (c: LabCtl) => {
      assert.match(String((await ha.kubectl(c, ['logs', 'web'])).stdout), /started/, `logs through ${c.host.name}`);
      assert.equal(
        String((await ha.kubectl(c, ['exec', 'web', '--', 'cat', '/www/index.html'])).stdout).trim(),
        'web',
        `exec through ${c.host.name}`,
      );
      assert.equal(await ha.portForward(c, 'web', 8080), 'web', `port-forward through ${c.host.name}`);
    };
    for (const c of [c1, c2]) await reachPod(c);

    assert.equal(
      (await ha.kubectl(c1, ['create', 'secret', 'generic', 'shared', '--from-literal=v=ha-secret'])).exitCode,
      0,
    );
    const secretThrough = async (c: LabCtl) =>
      Buffer.from(
        String((await ha.kubectl(c, ['get', 'secret', 'shared', '-o', 'jsonpath={.data.v}'])).stdout),
        'base64',
      ).toString();
    const keysInLeases = async (c: LabCtl) =>
      ((await ha.status(c)).controllers ?? []).map((x) => `${x.name}=${x.encryptionKeys ?? ''}`);
    const reads = { ok: 0, failed: [] as string[], on: true };
    const reader = (async () => {
      while (reads.on) {
        for (const c of [c1, c2]) {
          const v = await secretThrough(c);
          if (v === 'ha-secret') reads.ok++;
          else reads.failed.push(`${c.host.name}: ${JSON.stringify(v)}`);
        }
        await new Promise((r) => setTimeout(r, 1000));
      }
    })();
    const first = await ha.rotateKey(c2);
    reads.on = false;
    await reader;
    assert.deepEqual(first.controllers, [controllerLeaseName(c1.host.ip), controllerLeaseName(c2.host.ip)].sort());
    assert.deepEqual(reads.failed, [], 'a read of the Secret failed during the rotation');
    assert.ok(reads.ok >= 20, `only ${reads.ok} reads during the rotation`);
    assert.match(first.progress, /waiting for kctl-controller-/);
    assert.deepEqual(
      await keysInLeases(c1),
      first.controllers.map((n) => `${n}=${first.key}`),
    );

    // c1's host loses all its processes: c2 alone serves the node, on the same database.
    const readySince = async (c: LabCtl) =>
      String(
        (
          await ha.kubectl(c, [
            'get',
            'node',
            'w1',
            '-o',
            'jsonpath={.status.conditions[?(@.type=="Ready")].lastTransitionTime}',
          ])
        ).stdout,
      );
    const readyBefore = await readySince(c2);
    const { execAfterS } = await ha.loseController(c1, c2, 'web');
    t.diagnostic(`first kubectl exec through the survivor ${execAfterS.toFixed(1)} s after c1 was killed`);
    await reachPod(c2);
    await ha.runNewPod(c2, 'after-loss', /^w1$/);
    await ha.agentsFollow([c2], ['w1']);
    assert.equal(await readySince(c2), readyBefore, 'node w1 changed its Ready condition while a controller was lost');
    // The key moves on while c1 is down: c1 keeps only the key that is dropped now.
    const second = await ha.rotateKey(c2);
    assert.deepEqual(second.controllers, [controllerLeaseName(c2.host.ip)]);
    assert.notEqual(second.key, first.key);

    // c1 comes back: the agent connects to it with no restart, two servers again, and it serves the pod.
    await ha.start(c1);
    await ha.agentsFollow([c1, c2], ['w1']);
    await reachPod(c1);
    assert.equal(await readySince(c1), readyBefore);
    // It fetched the cluster's keys through c2 and reads Secrets with them.
    assert.ok(c1.proc!.saw('read the encryption key set through another controller'), c1.proc!.log());
    assert.equal(await secretThrough(c1), 'ha-secret');
    await waitFor('both leases name the newest key', 60_000, async () => {
      const names = await keysInLeases(c1);
      return names.length === 2 && names.every((n) => n.endsWith(`=${second.key}`));
    });
  },
);
