// HA through the front doors: three controllers on etcd, each host with its own front door (the
// second and third join through the first's door, its join port closed to them), and a
// worker that may reach nothing of any controller host but the door's port. It joins through
// the first's door (its token names that one), learns the others' doors from their leases, and its
// agent and API balancer hold every door. The first controller's host then loses every process:
// exec through the second works within seconds and the node stays Ready, all through the second
// host's door.
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import type { WorkerStatusReport } from '../../../src/worker/index.ts';
import { nodeReady, runPinnedPod, startLabWorker } from '../lab/cluster.ts';
import { DOOR_PORT, onlyTheDoor } from '../lab/front-door.ts';
import { HaLab, type LabCtl } from '../lab/ha-lab.ts';
import { startLab } from '../lab/lab-test.ts';
import { waitFor } from '../../wait.ts';

/** The controllers' join port (spec.api.joinPort's default). */
const JOIN_PORT = 9443;
import { join } from 'node:path';

test(
  "a worker that reaches only the controllers' front doors holds every one and survives losing the first controller",
  { timeout: 20 * 60_000 },
  async (t: TestContext) => {
    const { lab, dir, kctlBin } = await startLab(t, 'hafd', ['c1', 'c2', 'c3', 'w1'], {
      dir: 'kctl-hafd-',
      workers: ['w1'],
    });
    const w1 = lab.host('w1');
    const ha = new HaLab(kctlBin, dir);
    const ctls: LabCtl[] = [];
    for (const name of ['c1', 'c2', 'c3']) {
      const host = lab.host(name);
      ctls.push(
        await ha.controller(
          host,
          [
            `  api: { address: ${host.ip} }`,
            `  storage: { type: etcd, etcd: { memberName: ${name} } }`,
            `  frontDoor: { enabled: true, port: ${DOOR_PORT}, baseDomain: clusters.test, name: alpha }`,
            '',
          ].join('\n'),
        ),
      );
    }
    // Three etcd members: losing one keeps a quorum.
    const [c1, c2, c3] = ctls as [LabCtl, LabCtl, LabCtl];
    // Each its own host state (the lab's hosts share one file system): each host's door has its own registry.
    for (const c of ctls) c.hostState = join(dir, `${c.host.name}-host-state`);
    await ha.start(c1);
    const ctoken = String(
      (await ha.run(c1, ['token', 'create', '--role', 'controller', '--expiry', '1h', '--uses', '2'])).stdout,
    ).trim();
    const ctokenFile = await ha.tokenFile('controller.token', ctoken);
    // The others join through c1's door (the controller token names it): c1's join port is closed to them.
    for (const c of [c2, c3]) {
      const r = await c1.host.run('iptables', [
        ...['-w', '5', '-A', 'INPUT', '-s', c.host.ip, '-p', 'tcp', '--dport', String(JOIN_PORT), '-j', 'REJECT'],
      ]);
      assert.equal(r.exitCode, 0, String(r.stderr));
      assert.equal(await lab.canConnect(c.host, c1.host, JOIN_PORT), false, `${c.host.name} reaches c1's join port`);
    }
    await ha.start(c2, ctokenFile);
    await ha.start(c3, ctokenFile);
    for (const c of [c2, c3]) {
      const joined = c.proc!.lines(/"msg":"joined the cluster as a controller"/);
      assert.equal(joined.length, 1, `${c.host.name} joined ${joined.length} times`);
      assert.match(joined[0]!, new RegExp(`"via":"https://${c1.host.ip.replace(/\./g, '\\.')}:${DOOR_PORT}"`));
    }

    await lab.isolate(w1, c1.host, c2.host, c3.host);
    for (const c of ctls) await onlyTheDoor(lab, w1, c.host);
    const wtoken = String((await ha.run(c1, ['token', 'create', '--role', 'worker'])).stdout).trim();
    const worker = startLabWorker(kctlBin, w1, dir, wtoken);
    const kubectl2 = (args: string[], input?: string) => ha.kubectl(c2, args, input);
    await waitFor('w1 Ready', 300_000, () => nodeReady(kubectl2, 'w1'), worker.log);
    await runPinnedPod(kubectl2, 'web', 'w1', 'started', true);

    const doors = ctls.map((c) => `${c.host.ip}:${DOOR_PORT}`).sort();
    const workerStatus = async () =>
      JSON.parse(
        String((await w1.run(kctlBin, ['status', '-o', 'json', '--run-dir', join(dir, 'w1-run')])).stdout),
      ) as WorkerStatusReport;
    await waitFor('the worker holds every door (agent and API balancer)', 120_000, async () => {
      const s = await workerStatus();
      const agentDoors = (s.konnectivityAgent?.servers ?? []).map((x) => x.address).sort();
      const upstreams = (s.apiBalancer?.upstreams ?? [])
        .filter((u) => u.healthy)
        .map((u) => u.address)
        .sort();
      return agentDoors.join() === doors.join() && upstreams.join() === doors.join();
    });
    await ha.agentsFollow([c1, c2, c3], ['w1']);
    for (const c of ctls) {
      const agent = (await ha.status(c)).konnectivity?.agents.find((a) => a.node === 'w1');
      assert.equal(agent?.via, 'front-door', `w1's stream on ${c.host.name}`);
    }

    // c1's host loses every process: exec through c2's door within seconds, the node stays Ready.
    const { execAfterS } = await ha.loseController(c1, c2, 'web');
    t.diagnostic(`exec through c2 ${execAfterS.toFixed(1)} s after c1 was lost`);
    assert.ok(await nodeReady(kubectl2, 'w1'), 'w1 is not Ready after c1 was lost');
    const exec = await kubectl2(['exec', 'web', '--', 'cat', '/www/index.html']);
    assert.equal(String(exec.stdout).trim(), 'web', String(exec.stderr));
    await waitFor('the balancer keeps c2 healthy', 60_000, async () =>
      (await workerStatus()).apiBalancer?.upstreams.some(
        (u) => u.address === `${c2.host.ip}:${DOOR_PORT}` && u.healthy,
      ),
    );
  },
);
