// Worker profiles: the controller's spec.workerProfiles reach each node's kubelet, read back from
// kubelet's own /configz through the tunnel (the workers refuse every connection from the
// controller host). w1 runs --profile small; w2 has no --profile and runs the profile named
// default. A changed profile reaches w1's kubelet live (the worker keeps running), a profile the
// cluster does not have stops a worker with one clear line, and a bad profile stops the controller
// at config load with the field's path.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readFile, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import type { Socket } from 'node:net';
import { connect } from 'node:tls';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import type { Result } from 'execa';
import {
  controllerReady,
  labWorkerStatus,
  labController,
  startIsolatedWorker,
  startLabWorker,
  track,
  type Tracked,
} from '../lab/cluster.ts';
import { startLab } from '../lab/lab-test.ts';
import { pkiPaths } from '../../../src/pki/paths.ts';
import { controllerPaths } from '../../../src/controller/config/paths.ts';
import { waitFor } from '../../wait.ts';

const text = (r: Result) => String(r.stdout).trim();

/**
 * GET `path` from kubelet on `node` as kube-apiserver reaches it: CONNECT NODE:10250 on the
 * controller's HTTP-CONNECT konnectivity socket (its agent on that node dials), then TLS with kube-apiserver's
 * kubelet client certificate, checking kubelet's serving certificate against its CA.
 */
async function kubeletGet(dataDir: string, runDir: string, node: string, path: string): Promise<string> {
  const pki = pkiPaths(join(dataDir, 'pki'));
  const socketPath = controllerPaths(dataDir, runDir).konnectivityConnectSocket;
  const socket = await new Promise<Socket>((resolve, reject) => {
    const req = request({
      socketPath,
      method: 'CONNECT',
      path: `${node}:10250`,
    });
    req.on('connect', (res, sock) =>
      res.statusCode === 200 ? resolve(sock) : reject(new Error(`CONNECT ${node}:10250: ${res.statusCode}`)),
    );
    req.on('error', reject);
    req.end();
  });
  const [cert, key, ca] = await Promise.all(
    [pki.kubeletClientCert, pki.kubeletClientKey, pki.kubeletServingCaCert].map((f) => readFile(f)),
  );
  const tls = connect({ socket, cert, key, ca, servername: node });
  // HTTP/1.0: the whole body, not chunked, until kubelet closes.
  await once(tls, 'secureConnect');
  tls.write(`GET ${path} HTTP/1.0\r\nHost: ${node}:10250\r\nConnection: close\r\n\r\n`);
  let raw = '';
  for await (const chunk of tls) raw += String(chunk);
  const [head, ...body] = raw.split('\r\n\r\n');
  if (!/^HTTP\/1\.[01] 200/.test(head ?? '')) throw new Error(`GET ${path} on ${node}: ${head}`);
  return body.join('\r\n\r\n');
}

/** The config's spec.workerProfiles as YAML, from name -> kubelet fields. */
const profilesYaml = (profiles: Record<string, Record<string, unknown>>) =>
  `  workerProfiles:\n${Object.entries(profiles)
    .map(([name, values]) => `    - name: ${name}\n      values: ${JSON.stringify(values)}\n`)
    .join('')}`;

test('worker profiles: each node runs its profile kubelet settings, follows a change live, and a missing or bad profile is refused', async (t: TestContext) => {
  const { lab, dir, kctlBin } = await startLab(t, 'wprof', ['ctl', 'w1', 'w2', 'w3'], {
    workers: ['w1', 'w2', 'w3'],
  });
  const ctl = lab.host('ctl');
  const [w1, w2, w3] = ['w1', 'w2', 'w3'].map((n) => lab.host(n));
  const c = await labController(kctlBin, ctl, dir);
  const config = (small: number, smallExtra: Record<string, unknown> = {}) =>
    writeFile(
      join(dir, 'kctl.yaml'),
      `spec:\n  api: { address: ${ctl.ip} }\n` +
        profilesYaml({
          small: { maxPods: small, evictionHard: { 'memory.available': '150Mi' }, ...smallExtra },
          default: { maxPods: 33, serializeImagePulls: false },
        }),
    );

  // A profile kubelet cannot take is refused at config load, naming the field; nothing is written.
  const bad = join(dir, 'bad.yaml');
  await writeFile(bad, `spec:\n  api: { address: ${ctl.ip} }\n${profilesYaml({ small: { maxpods: 5 } })}`);
  const refused = await ctl.run(kctlBin, [
    'controller',
    '--config',
    bad,
    '--data-dir',
    join(dir, 'bad-data'),
    '--init-only',
  ]);
  assert.notEqual(refused.exitCode, 0);
  assert.match(
    String(refused.stderr),
    /spec\.workerProfiles\.0\.values\.maxpods: kubelet's configuration has no field "maxpods" \(did you mean "maxPods"\?\)/,
  );
  assert.equal(
    (await ctl.run('test', ['-e', join(dir, 'bad-data')])).exitCode,
    1,
    'the refused config wrote no data dir',
  );

  await config(17);
  let controller: Tracked = track(ctl.spawn(kctlBin, c.args));
  await controllerReady(controller);
  const worker1 = await startIsolatedWorker(kctlBin, lab, c, ctl, w1!, dir, ['--profile', 'small']);
  await startIsolatedWorker(kctlBin, lab, c, ctl, w2!, dir);

  // kubelet's running configuration, as it reports it, through the tunnel: what kube-apiserver
  // does for /nodes/NAME/proxy (whose check resolves the node's name, which this lab's DNS cannot).
  const configz = async (node: string): Promise<Configz['kubeletconfig']> =>
    (JSON.parse(await kubeletGet(c.dataDir, c.runDir, node, '/configz')) as Configz).kubeletconfig;
  type Configz = {
    kubeletconfig: { maxPods: number; evictionHard: Record<string, string>; serializeImagePulls?: boolean };
  };
  const k1 = await configz('w1');
  assert.equal(k1.maxPods, 17);
  // A profile's map merges into kctl's: its entry, and kctl's others kept.
  assert.equal(k1.evictionHard['memory.available'], '150Mi');
  assert.equal(k1.evictionHard['nodefs.available'], '1%');
  const k2 = await configz('w2');
  assert.equal(k2.maxPods, 33);
  assert.equal(k2.serializeImagePulls, false);
  const capacity = async (node: string) =>
    text(await c.kubectl(['get', 'node', node, '-o', 'jsonpath={.status.capacity.pods}']));
  assert.equal(await capacity('w1'), '17');
  assert.equal(await capacity('w2'), '33');

  const status = await labWorkerStatus(kctlBin, w1!, dir);
  assert.deepEqual(status.kubeletProfile, { name: 'small', defined: true, fields: ['evictionHard', 'maxPods'] });

  // Nodes and worker tokens read the profiles; neither may change them.
  const can = async (verb: string, ...as: string[]) =>
    text(await c.kubectl(['auth', 'can-i', verb, 'configmaps/kctl-worker-profiles', '-n', 'kube-system', ...as]));
  const asNode = ['--as=system:node:w1', '--as-group=system:nodes', '--as-group=system:authenticated'];
  const asToken = ['--as=system:bootstrap:abcdef', '--as-group=system:bootstrappers:kctl:worker'];
  for (const as of [asNode, asToken]) {
    assert.equal(await can('get', ...as), 'yes', as.join(' '));
    for (const verb of ['update', 'patch', 'delete'])
      assert.match(await can(verb, ...as), /^no/, `${verb} ${as.join(' ')}`);
  }

  // A change: the controller restarted with small's maxPods at 21; w1's kubelet follows, its worker keeps running.
  const restart = async (small: number, smallExtra?: Record<string, unknown>) => {
    controller.child.kill('SIGTERM');
    await controller.exited;
    await config(small, smallExtra);
    controller = track(ctl.spawn(kctlBin, c.args));
    await controllerReady(controller);
  };
  await restart(21);
  await waitFor(
    'w1 kubelet at maxPods 21',
    120_000,
    async () => (await configz('w1').catch(() => undefined))?.maxPods === 21,
    worker1.log,
  );
  await waitFor('w1 Node capacity 21 pods', 60_000, async () => (await capacity('w1')) === '21');
  assert.ok(worker1.saw('worker profile changed: restarting kubelet with it'), 'w1 says why kubelet restarted');
  assert.equal(worker1.child.exitCode, null, 'the w1 worker kept running');
  assert.equal((await configz('w2')).maxPods, 33, 'w2 (default) is unchanged');

  // A change kubelet refuses though it fits the shape (a feature gate locked on): w1 goes back to
  // the settings it ran, and says why.
  await restart(25, { featureGates: { KubeletTracing: false } });
  await waitFor('w1 says kubelet refused the profile', 240_000, async () =>
    worker1.saw('kubelet did not start with worker profile small'),
  );
  await waitFor(
    'w1 kubelet back at maxPods 21',
    120_000,
    async () => (await configz('w1').catch(() => undefined))?.maxPods === 21,
    worker1.log,
  );
  const after = await labWorkerStatus(kctlBin, w1!, dir);
  assert.match(
    after.kubeletProfile?.problem ?? '',
    /kubelet did not start with worker profile small .*previous settings/,
  );
  assert.equal(worker1.child.exitCode, null, 'the w1 worker kept running');

  // A profile the cluster does not have: the worker stops with one line naming the profiles it has.
  const token = await c.createToken('1h');
  await lab.isolate(w3!, ctl);
  const missing = startLabWorker(kctlBin, w3!, dir, token, ['--profile', 'huge']);
  const code = await Promise.race([
    missing.exited,
    new Promise<string>((resolve) => setTimeout(() => resolve('still running after 3 min'), 180_000).unref()),
  ]);
  assert.ok(typeof code === 'number' && code !== 0, `the worker with --profile huge: ${code}\n${missing.log()}`);
  assert.ok(
    missing.saw("worker profile huge is not in the cluster's spec.workerProfiles (it has default, small)"),
    missing.log(),
  );
});
