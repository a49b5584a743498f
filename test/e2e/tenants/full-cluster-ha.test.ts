// One full named cluster on two controller hosts: `kctl --name alpha controller` with kine on a
// shared PostgreSQL (the cluster's own database, kctl_alpha), joined on the second host with that
// cluster's controller token, and a worker cut off from both. An api-only control plane cannot
// join, and a join the cluster refuses (the single-use token again) leaves no tenant behind. Both
// controllers serve the worker's pod through its agent; the first controller's host then loses
// all its processes, and exec and logs work through the second.
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import type { TenantListEntry } from '../../../src/cli/tenant.ts';
import { nodeReady, runPinnedPod, startLabWorker } from '../lab/cluster.ts';
import { HaLab, type LabCtl } from '../lab/ha-lab.ts';
import type { LabHost } from '../lab/lab.ts';
import { startLab } from '../lab/lab-test.ts';
import { startPostgres } from '../lab/postgres.ts';
import { ownHostState } from '../lab/kctl.ts';
import { waitFor } from '../../wait.ts';

ownHostState();

test('a full named cluster on two controller hosts (kine on PostgreSQL): the second joins by token; losing the first is invisible to exec and logs', async (t: TestContext) => {
  const { lab, dir, kctlBin } = await startLab(t, 'fcha', ['db', 'c1', 'c2', 'w1'], {
    dir: 'kctl-fcha-',
    workers: ['w1'],
  });
  const [c1host, c2host, w1] = [lab.host('c1'), lab.host('c2'), lab.host('w1')];
  const ha = new HaLab(kctlBin, dir);
  const pg = await startPostgres(t, 5432, { host: lab.host('db'), trust: lab.subnet });
  // The server without a database: each named cluster gets its own, kctl_NAME.
  const server = (await pg.dataSource('scratch')).replace('/scratch?', '/?');
  const spec = (h: LabHost) =>
    `  profile: full\n  api: { address: ${h.ip} }\n  storage:\n    type: kine\n    kine: { dataSource: '${server}' }\n`;
  const c1 = await ha.controller(c1host, spec(c1host), 'c1', 'alpha');
  await ha.start(c1);
  await lab.isolate(w1, c1host, c2host);
  const worker = startLabWorker(
    kctlBin,
    w1,
    dir,
    String((await ha.run(c1, ['token', 'create', '--role', 'worker'])).stdout).trim(),
  );
  await waitFor('w1 Ready', 300_000, () => nodeReady((args) => ha.kubectl(c1, args), 'w1'), worker.log);
  await runPinnedPod((args, input) => ha.kubectl(c1, args, input), 'web', 'w1', 'started', true);

  const token = await ha.run(c1, ['token', 'create', '--role', 'controller']);
  assert.equal(token.exitCode, 0, String(token.stderr));
  const tokenFile = await ha.tokenFile('controller.token', String(token.stdout).trim());
  await ha.refused(
    await ha.controller(c2host, `  api: { address: ${c2host.ip} }\n`, 'c2-api-only', 'alpha'),
    tokenFile,
    /an api-only control plane \(spec\.profile: api-only\) runs alone: it cannot join another cluster with --token-file$/,
  );
  const c2 = await ha.controller(c2host, spec(c2host), 'c2', 'alpha');
  await ha.start(c2, tokenFile);
  // The token was single-use: the cluster refuses a second join, and the tenant that start made is gone again.
  await ha.refused(
    await ha.controller(c2host, spec(c2host), 'c2-again', 'alpha'),
    tokenFile,
    /the join token is used up \(1 join\)/,
  );

  for (const c of [c1, c2])
    assert.deepEqual((await ha.status(c)).storage, {
      type: 'kine',
      datastore: `postgres://${pg.host}:5432/kctl_alpha`,
    });
  await ha.agentsFollow([c1, c2], ['w1']);
  const reachPod = async (c: LabCtl) => {
    assert.match(String((await ha.kubectl(c, ['logs', 'web'])).stdout), /started/, `logs through ${c.host.name}`);
    assert.equal(
      String((await ha.kubectl(c, ['exec', 'web', '--', 'cat', '/www/index.html'])).stdout).trim(),
      'web',
      `exec through ${c.host.name}`,
    );
  };
  for (const c of [c1, c2]) await reachPod(c);

  // c1's host loses all its processes: c2 alone serves the node.
  const { execAfterS } = await ha.loseController(c1, c2, 'web', { intervalMs: 250 });
  t.diagnostic(`first kubectl exec through the survivor ${execAfterS.toFixed(1)} s after c1 was killed`);
  await reachPod(c2);
  await ha.agentsFollow([c2], ['w1']);

  const list = await ha.run(c2, ['tenant', 'list', '-o', 'json']);
  const entries = JSON.parse(String(list.stdout)) as TenantListEntry[];
  assert.deepEqual(
    entries.map((e) => [e.name, e.profile, e.state, e.nodes, e.agents]),
    [['alpha', 'full', 'running', { ready: 1, total: 1 }, 1]],
  );
  await ha.stop(c2);
  worker.child.kill('SIGTERM');
  await worker.exited;
});
