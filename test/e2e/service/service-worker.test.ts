// kctl install worker under a real systemd on a lab host the controller cannot reach: it joins
// with a token file (the secret never shows in the unit, ps or the journal), runs a pod, keeps
// the pod's container across `systemctl restart`, and uninstall + reset leave nothing behind.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { decodeToken } from '../../../src/join/token.ts';
import { controllerReady, labController, nodeReady, runPinnedPod, track } from '../lab/cluster.ts';
import { startLab } from '../lab/lab-test.ts';
import { bootSystemd } from '../lab/systemd.ts';
import { waitFor } from '../../wait.ts';

test('kctl install worker: joins from a token file, runs a pod, keeps it across a restart; uninstall and reset leave nothing', async (t: TestContext) => {
  const { lab, dir, kctlBin } = await startLab(t, 'sw', ['ctl', 'w1'], { dir: '/var/lib/kctl-test-service-worker-' });
  const [ctl, w1] = [lab.host('ctl'), lab.host('w1')];
  const c = await labController(kctlBin, ctl, dir);
  const controller = track(ctl.spawn(kctlBin, c.args));
  await controllerReady(controller);
  await lab.isolate(w1, ctl);

  const sd = await bootSystemd('kctl-svc-worker', w1.netns, t);
  const dataDir = join(dir, 'w1-data');
  const runDir = join(dir, 'w1-run');
  const inLab = (args: string[], input?: string) =>
    sd.exec(kctlBin, ['--data-dir', dataDir, '--run-dir', runDir, ...args], { input });
  const journal = async () =>
    String((await sd.exec('journalctl', ['-u', 'kctl-worker', '--no-pager', '-o', 'cat'])).stdout);
  const tail = async () => (await journal()).split('\n').slice(-15).join('\n');
  const token = await c.createToken('1h');
  const secret = decodeToken(token).bootstrapToken.split('.')[1]!;
  const tokenFile = join(dir, 'token');
  await writeFile(tokenFile, token + '\n', { mode: 0o600 });

  const bad = join(dir, 'bad-token');
  await writeFile(bad, 'not-a-token\n');
  const refused = await inLab(['install', 'worker', '--token-file', bad]);
  assert.notEqual(refused.exitCode, 0);
  assert.match(String(refused.stderr).trim(), /^kctl: --token-file .*bad-token: the join token is malformed/);
  assert.notEqual(
    (await sd.exec('test', ['-e', '/etc/systemd/system/kctl-worker.service'])).exitCode,
    0,
    'a refused install wrote a unit',
  );

  const installed = await inLab([
    'install',
    'worker',
    '--token-file',
    tokenFile,
    '--node-name',
    'w1',
    '--node-ip',
    w1.ip,
    '--labels',
    'site=lab',
  ]);
  assert.equal(installed.exitCode, 0, String(installed.stderr));
  const unit = String((await sd.exec('cat', ['/etc/systemd/system/kctl-worker.service'])).stdout);
  assert.match(unit, /^KillMode=process$/m);
  assert.ok(unit.includes(`--token-file ${join(dataDir, 'join-token')}`), unit);
  assert.ok(!unit.includes(secret), 'the token secret is in the unit file');
  assert.equal(String((await sd.exec('stat', ['-c', '%a', join(dataDir, 'join-token')])).stdout).trim(), '600');

  const started = await inLab(['start']);
  assert.equal(started.exitCode, 0, `${String(started.stderr)}\n${await tail()}`);
  // start returns once the node is Ready.
  assert.equal(await nodeReady(c.kubectl, 'w1'), true, 'systemctl start returned before the node was Ready');
  const status = String((await sd.exec('systemctl', ['status', '--no-pager', 'kctl-worker'])).stdout);
  assert.match(status, /Status: "worker ready: node w1 is Ready"/);
  const ps = String((await sd.exec('ps', ['-eo', 'args'])).stdout);
  assert.ok(!ps.includes(secret) && !(await journal()).includes(secret), 'the token secret shows in ps or the journal');

  await runPinnedPod(c.kubectl, 'steady', 'w1', 'up');
  const containerId = async () =>
    String(
      (await c.kubectl(['get', 'pod', 'steady', '-o', 'jsonpath={.status.containerStatuses[0].containerID}'])).stdout,
    );
  const before = await containerId();
  assert.match(String((await c.kubectl(['logs', 'steady'])).stdout), /up/);

  const mainBefore = String(
    (await sd.exec('systemctl', ['show', '-p', 'MainPID', '--value', 'kctl-worker'])).stdout,
  ).trim();
  // 8. A second worker on this data dir (another run dir) is refused, naming the running one; the running one carries on.
  const second = await sd.exec(kctlBin, [
    '--data-dir',
    dataDir,
    '--run-dir',
    join(dir, 'other-run'),
    'worker',
    '--token-file',
    tokenFile,
  ]);
  assert.notEqual(second.exitCode, 0);
  assert.equal(
    String(second.stderr).trim(),
    `kctl: a kctl worker (pid ${mainBefore}) is already running on ${dataDir}; stop it first (kill -TERM ${mainBefore}) or give this one its own --data-dir and --run-dir`,
  );
  assert.match(String((await c.kubectl(['logs', 'steady'])).stdout), /up/, 'logs after the refused second worker');

  // restart: kctl stops, the container does not; the node is Ready again with the same container.
  const restarted = await inLab(['restart']);
  assert.equal(restarted.exitCode, 0, `${String(restarted.stderr)}\n${await tail()}`);
  assert.notEqual(
    String((await sd.exec('systemctl', ['show', '-p', 'MainPID', '--value', 'kctl-worker'])).stdout).trim(),
    mainBefore,
  );
  await waitFor('w1 Ready', 120_000, () => nodeReady(c.kubectl, 'w1'));
  assert.equal(await containerId(), before, 'the container was replaced by the restart');
  assert.equal(
    String(
      (await c.kubectl(['get', 'pod', 'steady', '-o', 'jsonpath={.status.containerStatuses[0].restartCount}'])).stdout,
    ),
    '0',
  );
  assert.match(String((await c.kubectl(['logs', 'steady'])).stdout), /up/, 'logs through the tunnel after the restart');

  // uninstall stops and removes the unit; reset removes containers, mounts and data.
  const uninstalled = await inLab(['uninstall']);
  assert.equal(uninstalled.exitCode, 0, String(uninstalled.stderr));
  assert.notEqual((await sd.exec('test', ['-e', '/etc/systemd/system/kctl-worker.service'])).exitCode, 0);
  const reset = await inLab(['reset']);
  assert.equal(reset.exitCode, 0, String(reset.stderr));
  const left = String((await sd.exec('ps', ['-eo', 'args'])).stdout)
    .split('\n')
    .filter((l) => /containerd|kubelet|kube-proxy|pause|busybox|sleep 1|kctl/.test(l) && !/^ps /.test(l));
  assert.deepEqual(left, [], 'processes left after uninstall and reset');
  const mounts = String((await sd.exec('cat', ['/proc/self/mountinfo'])).stdout)
    .split('\n')
    .filter((l) => l.includes(dataDir));
  assert.deepEqual(mounts, [], 'mounts left under the data dir');
  assert.notEqual((await sd.exec('test', ['-e', dataDir])).exitCode, 0, 'the data dir is still there');
});
