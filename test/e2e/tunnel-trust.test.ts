// Tunnel trust with the real parts: a controller, a worker that joined with a token and runs a
// pod, and two impostor agents (kctl's and upstream's proxy-agent) holding valid node
// certificates of other nodes and claiming the worker's address. kubectl logs / exec keep
// reaching the worker; the impostors' claims show as dropped in `kctl status -o json`. Then a
// Node whose address changes: the claim follows within seconds, with no restart.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import type { ControllerStatusReport } from '../../src/controller/status.ts';
import type { ServerAgentSnapshot } from '../../src/konnectivity/index.ts';
import { controllerReady, cleanupWorkerHost, labController, nodeReady, runPinnedPod, startLabWorker, track, type Tracked } from './cluster.ts';
import { kctl, requireKctl } from './kctl.ts';
import { createLab, type LabHost } from './lab.ts';
import { kubeletServingCert, nodeCert } from './node-cert.ts';
import { upstreamBin } from './upstream.ts';
import { waitFor } from './wait.ts';

const ROUNDS = 50;

test('an agent draws only its own Node’s traffic: impostors are dropped, logs/exec always reach the real node, claims follow address changes', async (t: TestContext) => {
  const lab = await createLab('tt', ['ctl', 'w1', 'imp', 'imp2'], { t });
  const [ctl, w1, imp, imp2] = ['ctl', 'w1', 'imp', 'imp2'].map((n) => lab.host(n)) as [LabHost, LabHost, LabHost, LabHost];
  const dir = await mkdtemp(join(tmpdir(), 'kctl-trust-'));
  const procs: Tracked[] = [];
  t.after(async () => {
    for (const p of procs) p.child.kill('SIGKILL');
    await cleanupWorkerHost(join(dir, 'w1-data'), join(dir, 'w1-run'), 'w1');
    await rm(dir, { recursive: true, force: true });
  });
  const kctlBin = requireKctl();
  const c = await labController(kctlBin, ctl, dir);
  const controller = track(ctl.spawn(kctlBin, c.args));
  procs.push(controller);
  await controllerReady(controller);
  const agents = async (): Promise<ServerAgentSnapshot[]> => {
    const s = await kctl(['status', '-o', 'json', '--run-dir', c.runDir]);
    return (JSON.parse(String(s.stdout)) as ControllerStatusReport).konnectivity?.agents ?? [];
  };
  const agent = async (id: string) => (await agents()).find((a) => a.id === id);

  // The worker: isolated from the controller and from both impostor hosts.
  await lab.isolate(w1, ctl, imp, imp2);
  const token = await c.createToken('1h');
  const worker = startLabWorker(kctlBin, w1, dir, token);
  procs.push(worker);
  await waitFor('w1 Ready', 300_000, () => nodeReady(c.kubectl, 'w1'), worker.log);
  await runPinnedPod(c.kubectl, 'talker', 'w1', 'started');

  // Impostors: valid node certificates of other nodes, both claiming w1's address (and name).
  // x2 also claims its own host's address and one it will have later.
  const servingIp = lab.subnet.replace(/\.0\/24$/, '.200');
  const pki = join(c.dataDir, 'pki');
  const x2 = await nodeCert(pki, dir, 'x2');
  const x3 = await nodeCert(pki, dir, 'x3');
  const impostorKctl = track(
    imp.spawn(kctlBin, [
      'konnectivity-agent',
      '--debug',
      `--proxy-server-host=${ctl.ip}`,
      '--proxy-server-port=8132',
      `--ca-cert=${join(pki, 'ca.crt')}`,
      `--agent-cert=${x2.cert}`,
      `--agent-key=${x2.key}`,
      '--agent-id=x2',
      `--agent-identifiers=host=w1&ipv4=${w1.ip}&ipv4=${imp.ip}&ipv4=${servingIp}`,
      '--health-server-port=18093',
      '--admin-server-port=18094',
    ]),
  );
  const impostorUpstream = track(
    imp2.spawn(upstreamBin()['proxy-agent'], [
      `--proxy-server-host=${ctl.ip}`,
      '--proxy-server-port=8132',
      `--ca-cert=${join(pki, 'ca.crt')}`,
      `--agent-cert=${x3.cert}`,
      `--agent-key=${x3.key}`,
      '--agent-id=x3',
      `--agent-identifiers=host=w1&ipv4=${w1.ip}`,
      '--health-server-port=18095',
      '--admin-server-port=18096',
    ]),
  );
  procs.push(impostorKctl, impostorUpstream);
  await waitFor(
    'three agents connected',
    60_000,
    async () => (await agents()).length === 3,
    () => `x2:\n${impostorKctl.log()}\nx3:\n${impostorUpstream.log()}`,
  );
  const real = (await agent('w1'))!;
  // w1's agent also serves its Node's pod CIDR (dials to its pods), without claiming it.
  const podCIDR = String((await c.kubectl(['get', 'node', 'w1', '-o', 'jsonpath={.spec.podCIDR}'])).stdout);
  assert.match(podCIDR, /^10\.244\.\d+\.0\/24$/);
  assert.deepEqual(real.accepted, { host: ['w1'], ipv4: [w1.ip], ipv6: [], cidr: [podCIDR], defaultRoute: false });
  for (const id of ['x2', 'x3']) {
    const a = (await agent(id))!;
    assert.deepEqual(a.accepted.ipv4, [], `${id} was granted an address`);
    assert.deepEqual(a.accepted.host, [], `${id} was granted a name`);
    assert.ok(
      a.dropped.some((d) => d.claim === `ipv4=${w1.ip}` && d.reason === 'reported by node w1'),
      `${id}: ${JSON.stringify(a.dropped)}`,
    );
  }
  t.diagnostic(`x2 dropped: ${JSON.stringify((await agent('x2'))!.dropped)}`);
  assert.ok(controller.saw('agent x3: dropped claims'), 'no warn line for the upstream impostor');

  // The impostor hosts cannot reach w1's kubelet: a dial sent to them would fail the command.
  assert.equal(await lab.canConnect(imp, w1, 10250), false);
  assert.equal(await lab.canConnect(imp2, w1, 10250), false);
  for (let i = 0; i < ROUNDS; i++) {
    const logs = await c.kubectl(['logs', 'talker']);
    assert.equal(String(logs.stdout).trim(), 'started', `round ${i}: logs ${String(logs.stderr)}`);
    const exec = await c.kubectl(['exec', 'talker', '--', 'echo', `round-${i}`]);
    assert.equal(String(exec.stdout).trim(), `round-${i}`, `round ${i}: exec ${String(exec.stderr)}`);
  }
  assert.equal(impostorKctl.saw('"msg":"dialing target"'), false, 'the kctl impostor was sent a dial');
  t.diagnostic(`${ROUNDS} x (logs + exec) reached w1, none went to an impostor`);

  // Node x2 registers with the impostor host's address: from then on that address is x2's.
  const serving = await kubeletServingCert(pki, dir, 'x2', imp.ip, servingIp);
  const www = join(dir, 'www');
  await mkdir(www);
  await writeFile(join(www, 'hello.txt'), 'hello from x2\n');
  // Only x2's agent (on imp itself) can reach imp now; a dial routed to any other agent fails.
  await lab.isolate(imp, ctl, w1, imp2);
  procs.push(
    track(imp.spawn('openssl', ['s_server', '-quiet', '-WWW', '-accept', '10250', '-cert', serving.cert, '-key', serving.key], { cwd: www })),
  );
  const setAddress = async (ip: string) => {
    const status = { addresses: [{ type: 'InternalIP', address: ip }], daemonEndpoints: { kubeletEndpoint: { Port: 10250 } } };
    const r = await c.kubectl(['patch', 'node', 'x2', '--subresource=status', '--type=merge', '-p', JSON.stringify({ status })]);
    assert.equal(r.exitCode, 0, String(r.stderr));
  };
  const follows = async (ip: string, what: string) => {
    const from = Date.now();
    await waitFor(what, 30_000, async () => (await agent('x2'))?.accepted.ipv4.join() === ip, undefined, 250);
    t.diagnostic(`${what}: ${Date.now() - from} ms after the Node changed`);
  };
  const throughX2 = async (n: number) => {
    for (let i = 0; i < n; i++) {
      const r = await c.kubectl(['get', '--raw', '/api/v1/nodes/https:x2:10250/proxy/hello.txt']);
      assert.equal(String(r.stdout).trim(), 'hello from x2', `request ${i}: ${String(r.stderr)}`);
    }
  };
  assert.equal((await c.kubectl(['create', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'x2' } }))).exitCode, 0);
  await setAddress(imp.ip);
  await follows(imp.ip, `x2 granted ${imp.ip}`);
  assert.ok(
    (await agent('x2'))!.dropped.some((d) => d.claim === `ipv4=${w1.ip}`),
    'w1 stays w1',
  );
  await throughX2(10);

  // The address moves: the agent keeps its stream, the old address stops routing to it, the new one starts.
  assert.equal((await imp.run('ip', ['addr', 'add', `${servingIp}/24`, 'dev', 'eth0'])).exitCode, 0);
  const connectedAt = (await agent('x2'))!.connectedAt;
  await setAddress(servingIp);
  await follows(servingIp, `x2 moved to ${servingIp}`);
  const moved = (await agent('x2'))!;
  assert.equal(moved.connectedAt, connectedAt, 'the agent reconnected');
  assert.ok(
    moved.dropped.some((d) => d.claim === `ipv4=${imp.ip}` && d.reason === 'node x2 does not report it'),
    JSON.stringify(moved.dropped),
  );
  await throughX2(10);
  assert.ok(impostorKctl.saw(`"address":"${servingIp}:10250"`), `x2's agent did not dial ${servingIp}`);
});
