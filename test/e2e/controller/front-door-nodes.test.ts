// Nodes through the front door: a full cluster with spec.frontDoor, and a worker whose host may
// reach nothing of the controller host's but the door's port (every other port rejected on its way
// out). It joins with a token that names the door, kubelet bootstraps and works through the node's
// API balancer (passing through the door by the API's name, then in the node API tunnel with the
// node's certificate), and its agent dials konnectivity.<name>.<domain> on the door's port (the
// server's certificate checked for that name), so kube-apiserver's logs and exec reach its pod. The join endpoint behind the door counts failed joins per client address (the
// door hands it on in a PROXY v2 header): the worker host's bad tokens block the worker host, not
// the controller host, though both arrive through the same door. kctl status shows the door's
// names and the connections it routed.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import type { ControllerStatusReport } from '../../../src/controller/leases/status.ts';
import type { WorkerStatusReport } from '../../../src/worker/index.ts';
import { controllerReady, labController, runPinnedPod, startIsolatedWorker, track } from '../lab/cluster.ts';
import { hostStateArgs, kctl, ownHostState } from '../lab/kctl.ts';
import { startLab } from '../lab/lab-test.ts';
import {
  DOOR_API,
  DOOR_PORT,
  kubernetesEndpointsNow,
  noPodRouteTo,
  onlyTheDoor,
  podGetsApi,
  writeDoorConfig,
} from '../lab/front-door.ts';
import type { LabHost } from '../lab/lab.ts';
import { waitFor } from '../../wait.ts';

const API = DOOR_API;

// The door's registry in a host state dir of this file's own, not the machine's.
ownHostState();
test("a worker that may reach only the controller's front door joins, runs a pod and gets logs and exec through it; the join endpoint behind it counts each client's failures", async (t) => {
  const { lab, dir, kctlBin } = await startLab(t, 'fdn', ['ctl', 'w1'], { dir: 'kctl-fdnodes-', workers: ['w1'] });
  const [ctl, w1] = [lab.host('ctl'), lab.host('w1')];
  const c = await labController(kctlBin, ctl, dir);
  await writeDoorConfig(dir, ctl);
  const controller = track(ctl.spawn(kctlBin, [...hostStateArgs(), ...c.args]));
  await controllerReady(controller);

  // w1 may reach the door and nothing else of the controller host's: every other TCP port is rejected.
  await onlyTheDoor(lab, w1, ctl);

  await startIsolatedWorker(kctlBin, lab, c, ctl, w1, dir);
  const workerStatus = async () =>
    JSON.parse(
      String((await w1.run(kctlBin, ['status', '-o', 'json', '--run-dir', join(dir, 'w1-run')])).stdout),
    ) as WorkerStatusReport;
  await waitFor('the agent holds a stream through the front door', 120_000, async () =>
    (await workerStatus()).konnectivityAgent?.servers.some((s) => s.address === `${ctl.ip}:${DOOR_PORT}`),
  );
  // kubelet, kube-proxy and kctl reach the API through the door too (the balancer's one upstream).
  assert.deepEqual(
    (await workerStatus()).apiBalancer?.upstreams.map((u) => [u.address, u.healthy]),
    [[`${ctl.ip}:${DOOR_PORT}`, true]],
  );
  await runPinnedPod(c.kubectl, 'p1', 'w1', 'hello through the door', true);
  assert.equal(String((await c.kubectl(['logs', 'p1'])).stdout).trim(), 'hello through the door');
  const exec = await c.kubectl(['exec', 'p1', '--', 'cat', '/www/index.html']);
  assert.equal(String(exec.stdout).trim(), 'p1', String(exec.stderr));

  // Pods reach the API through the kubernetes Service, whose endpoint is the node-local address
  // on every node: w1's balancer carries them in the node API tunnel. They have no route of their
  // own to the controller host (every connection forwarded from w1 to it is rejected).
  await noPodRouteTo(w1, ctl);
  await waitFor('the kubernetes Service names the node-local address', 60_000, async () =>
    (await kubernetesEndpointsNow(c.kubectl)) === '198.18.0.1:6443' ? true : undefined,
  );
  assert.equal((await workerStatus()).apiBalancer?.podsListen, '198.18.0.1:6443');
  const viaService = await waitFor('a pod reads the API through the kubernetes Service', 60_000, async () => {
    const r = await podGetsApi(c.kubectl, 'p1');
    return r.exitCode === 0 ? String(r.stdout) : undefined;
  });
  assert.match(viaService, /"kind":\s*"APIVersions"/);
  const direct = await podGetsApi(c.kubectl, 'p1', `https://${ctl.ip}:6443`);
  assert.notEqual(direct.exitCode, 0, `the pod reached the controller host directly: ${String(direct.stdout)}`);

  const status = async () =>
    JSON.parse(String((await kctl(['status', '-o', 'json', '--run-dir', c.runDir])).stdout)) as ControllerStatusReport;
  const door = (await status()).frontDoor;
  assert.deepEqual(door?.names, {
    api: API,
    konnectivity: `konnectivity.${API}`,
    join: `join.${API}`,
    nodeApi: `node-api.${API}`,
  });
  assert.ok((door?.door?.clusters.alpha?.total ?? 0) >= 1, `the door routed nothing: ${JSON.stringify(door)}`);
  // The agent's stream came through the door, from w1 itself (the door named it in its PROXY header).
  const w1Agent = (await status()).konnectivity?.agents.find((a) => a.node === 'w1');
  assert.deepEqual([w1Agent?.via, w1Agent?.client], ['front-door', w1.ip]);
  const text = String((await kctl(['status', '--run-dir', c.runDir])).stdout);
  assert.match(text, new RegExp(`^Front door on port ${DOOR_PORT}: api=${API.replace(/\./g, '\\.')}`, 'm'));

  // The join endpoint through the door, with the cluster CA and its name checked (curl --cacert).
  const joinThroughDoor = async (from: LabHost) => {
    const r = await from.run('curl', [
      '-sS',
      '--max-time',
      '10',
      '--cacert',
      join(c.dataDir, 'pki', 'ca.crt'),
      '--resolve',
      `join.${API}:${DOOR_PORT}:${ctl.ip}`,
      '-X',
      'POST',
      '-H',
      'Authorization: Bearer kctl-bad.token',
      '-d',
      '{}',
      `https://join.${API}:${DOOR_PORT}/v1/controller/join`,
    ]);
    assert.equal(r.exitCode, 0, `curl from ${from.name}: ${String(r.stderr)}`);
    return String(r.stdout);
  };
  let answer = '';
  for (let i = 0; i < 12 && !answer.includes('too many failed join attempts'); i++) answer = await joinThroughDoor(w1);
  assert.match(answer, new RegExp(`too many failed join attempts from ${w1.ip.replace(/\./g, '\\.')};`));
  // The controller host's own client, through the same door, is not the one blocked.
  const other = await joinThroughDoor(ctl);
  assert.doesNotMatch(other, /too many failed join attempts/);
  assert.match(other, /token/i);
});

test('a cluster that turns its front door on keeps its nodes: a running worker moves to the door by itself (no rejoin, no restart) and works when nothing else is reachable', async (t) => {
  const { lab, dir, kctlBin } = await startLab(t, 'fdu', ['ctl', 'w1'], { dir: 'kctl-fdup-', workers: ['w1'] });
  const [ctl, w1] = [lab.host('ctl'), lab.host('w1')];
  const c = await labController(kctlBin, ctl, dir);
  await writeDoorConfig(dir, ctl, false);
  let controller = track(ctl.spawn(kctlBin, [...hostStateArgs(), ...c.args]));
  await controllerReady(controller);
  const worker = await startIsolatedWorker(kctlBin, lab, c, ctl, w1, dir);
  await runPinnedPod(c.kubectl, 'p1', 'w1', 'before the door', true);

  controller.child.kill('SIGTERM');
  await controller.exited;
  await writeDoorConfig(dir, ctl, true);
  controller = track(ctl.spawn(kctlBin, [...hostStateArgs(), ...c.args]));
  await controllerReady(controller);
  const workerStatus = async () =>
    JSON.parse(
      String((await w1.run(kctlBin, ['status', '-o', 'json', '--run-dir', join(dir, 'w1-run')])).stdout),
    ) as WorkerStatusReport;
  const door = `${ctl.ip}:${DOOR_PORT}`;
  await waitFor('the worker follows the lease to the front door', 120_000, async () => {
    const s = await workerStatus();
    return (
      s.konnectivityAgent?.servers.some((x) => x.address === door) &&
      s.apiBalancer?.upstreams.every((u) => u.address === door && u.healthy)
    );
  });
  // Now nothing else of the controller host's is reachable from w1.
  await onlyTheDoor(lab, w1, ctl);
  const exec = await waitFor('exec through the door', 60_000, async () => {
    const r = await c.kubectl(['exec', 'p1', '--', 'cat', '/www/index.html']);
    return r.exitCode === 0 ? String(r.stdout).trim() : undefined;
  });
  assert.equal(exec, 'p1');
  assert.equal(String((await c.kubectl(['logs', 'p1'])).stdout).trim(), 'before the door');
  // kubelet still reports: its API connections ride the node API tunnel (its kubeconfig names no server).
  await runPinnedPod(c.kubectl, 'p2', 'w1', 'after the door', true);
  // Its pods moved too: the pod from before the door reads the API at the node-local address.
  await waitFor('the kubernetes Service names the node-local address', 60_000, async () =>
    (await kubernetesEndpointsNow(c.kubectl)) === '198.18.0.1:6443' ? true : undefined,
  );
  await noPodRouteTo(w1, ctl);
  await waitFor('the pod from before the door reads the API', 60_000, async () => {
    const r = await podGetsApi(c.kubectl, 'p1');
    return r.exitCode === 0 && /"kind":\s*"APIVersions"/.test(String(r.stdout));
  });
  assert.equal(worker.child.exitCode, null, 'the worker restarted');
  assert.equal(worker.lines(/"msg":"joined the cluster"/).length, 1, 'the worker joined again');
});
