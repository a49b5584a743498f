// A worker stopped while it starts: a SIGTERM right as a component begins its start (the
// manager's "starting X" line) must still tear down whatever that component set up by then,
// as `systemctl stop` during a slow first join does.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { controllerReady, labController, startLabWorker, track } from '../lab/cluster.ts';
import { startLab } from '../lab/lab-test.ts';
import { waitFor } from '../../wait.ts';

// The agent and the controller watch are left out: they start within milliseconds, so a signal
// sent on their line lands after the start (the worker test covers a SIGTERM after start).
const steps = ['containerd', 'images', 'kubelet', 'network', 'kube-proxy'];

test(`a worker given SIGTERM as any of ${steps.join(', ')} starts: exit 0, none of its processes left, no status socket; then it starts whole`, async (t) => {
  const { lab, dir, kctlBin } = await startLab(t, 'ws', ['ctl', 'w1'], { dir: 'kctl-worker-stop-', workers: ['w1'] });
  const ctl = lab.host('ctl');
  const w1 = lab.host('w1');
  const c = await labController(kctlBin, ctl, dir);
  await controllerReady(track(ctl.spawn(kctlBin, c.args)));
  const token = await c.createToken('1h');

  /**
   * The worker's own processes (containerd, kubelet, kube-proxy) still running: their command lines
   * name its dirs. Containers are not counted, as they outlive a stopped worker by design: their
   * shims, and `runc init`, the first process of a container that kubelet was creating when the
   * signal came (it waits for a start, as a container in containerd's state does).
   */
  const leftovers = async (): Promise<string[]> =>
    String((await w1.run('pgrep', ['-af', join(dir, 'w1-')])).stdout)
      .split('\n')
      .filter((l) => l.trim() !== '' && !/pgrep|containerd-shim|\/runc init$/.test(l));

  for (const step of steps) {
    const w = startLabWorker(kctlBin, w1, dir, token);
    // The signal goes out as soon as the line is read, not at the next poll.
    const line = `"msg":"starting ${step}"`;
    let sent = false;
    w.child.stdout!.on('data', () => {
      if (!sent && w.saw(line)) {
        sent = true;
        w.child.kill('SIGTERM');
      }
    });
    await waitFor(`starting ${step}`, 180_000, async () => sent, w.log);
    assert.equal(await w.exited, 0, `${step}: exit\n${w.log()}`);
    assert.ok(!w.saw('"msg":"worker ready"'), `${step}: the start went on after SIGTERM\n${w.log()}`);
    assert.deepEqual(await leftovers(), [], `${step}: processes of this worker still running`);
    assert.equal(existsSync(join(dir, 'w1-run', 'status.sock')), false, `${step}: status socket left behind`);
  }

  // None of those stops left anything in the way of a whole start.
  const w = startLabWorker(kctlBin, w1, dir, token);
  await waitFor('worker ready', 180_000, async () => w.saw('"msg":"worker ready"'), w.log);
  // The leftover check sees a running worker's processes.
  const running = (await leftovers()).join('\n');
  for (const name of ['containerd ', 'kubelet ', 'kube-proxy '])
    assert.ok(running.includes(name), `${name.trim()} not found in:\n${running}`);
  w.child.kill('SIGTERM');
  assert.equal(await w.exited, 0, w.log());
  assert.deepEqual(await leftovers(), []);
});
