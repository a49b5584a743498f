// A worker whose only way out is an HTTP proxy: the lab's host `px` runs a real proxy (Debian's
// tinyproxy, CONNECT to the front door's port only), and the worker's host may reach nothing of the
// controller host's at all (every packet to it rejected on its way out). With HTTPS_PROXY set, the
// worker joins through the proxy and the door, kubelet bootstraps and runs a pod, and logs and exec
// reach it; the proxy's log shows each CONNECT, and the controller sees the agent's stream come
// through the door from the proxy's address.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import type { ControllerStatusReport } from '../../../src/controller/leases/status.ts';
import type { WorkerStatusReport } from '../../../src/worker/index.ts';
import { controllerReady, labController, runPinnedPod, track } from '../lab/cluster.ts';
import { hostStateArgs, kctl, ownHostState } from '../lab/kctl.ts';
import { startLab } from '../lab/lab-test.ts';
import { DOOR_PORT, startProxy, writeDoorConfig } from '../lab/front-door.ts';
import { waitFor } from '../../wait.ts';

// The door's registry in a host state dir of this file's own, not the machine's.
ownHostState();
test('a worker whose only way out is an HTTP proxy joins, runs a pod, and logs and exec reach it, all through the proxy and the front door', async (t) => {
  const { lab, dir, kctlBin } = await startLab(t, 'fdp', ['ctl', 'px', 'w1'], {
    dir: 'kctl-fdproxy-',
    workers: ['w1'],
  });
  const [ctl, px, w1] = [lab.host('ctl'), lab.host('px'), lab.host('w1')];
  const c = await labController(kctlBin, ctl, dir);
  await writeDoorConfig(dir, ctl);
  const controller = track(ctl.spawn(kctlBin, [...hostStateArgs(), ...c.args]));
  await controllerReady(controller);

  const { proxy, url: proxyUrl } = await startProxy(lab, px, w1, dir, DOOR_PORT);

  // w1 reaches the controller host only through px.
  await lab.isolate(w1, ctl);
  const blocked = await w1.run('iptables', ['-w', '5', '-A', 'OUTPUT', '-d', ctl.ip, '-j', 'REJECT']);
  assert.equal(blocked.exitCode, 0, String(blocked.stderr));
  assert.equal(await lab.canConnect(w1, ctl, DOOR_PORT), false, 'w1 reaches the controller host');

  const token = await c.createToken('1h');
  const worker = track(
    w1.spawn(
      kctlBin,
      [
        'worker',
        '--token',
        token,
        '--data-dir',
        join(dir, 'w1-data'),
        '--run-dir',
        join(dir, 'w1-run'),
        '--node-name',
        'w1',
        '--node-ip',
        w1.ip,
      ],
      { env: { ...process.env, HTTPS_PROXY: proxyUrl } },
    ),
  );
  await waitFor('worker ready', 240_000, async () => worker.saw('"msg":"worker ready"'), worker.log);
  await runPinnedPod(c.kubectl, 'p1', 'w1', 'hello through the proxy', true);
  assert.equal(String((await c.kubectl(['logs', 'p1'])).stdout).trim(), 'hello through the proxy');
  const exec = await c.kubectl(['exec', 'p1', '--', 'cat', '/www/index.html']);
  assert.equal(String(exec.stdout).trim(), 'p1', String(exec.stderr));

  const workerStatus = JSON.parse(
    String((await w1.run(kctlBin, ['status', '-o', 'json', '--run-dir', join(dir, 'w1-run')])).stdout),
  ) as WorkerStatusReport;
  assert.deepEqual(
    workerStatus.apiBalancer?.upstreams.map((u) => [u.address, u.healthy]),
    [[`${ctl.ip}:${DOOR_PORT}`, true]],
  );
  const status = JSON.parse(
    String((await kctl(['status', '-o', 'json', '--run-dir', c.runDir])).stdout),
  ) as ControllerStatusReport;
  const agent = status.konnectivity?.agents.find((a) => a.node === 'w1');
  assert.deepEqual(
    [agent?.via, agent?.client],
    ['front-door', px.ip],
    'the agent came from the proxy, through the door',
  );
  assert.ok(
    proxy.lines(new RegExp(`CONNECT ${ctl.ip.replace(/\./g, '\\.')}:${DOOR_PORT}`)).length > 0,
    `the proxy saw no CONNECT to the door:\n${proxy.log()}`,
  );
});
