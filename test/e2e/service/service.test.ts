// kctl under a real systemd (systemd.ts boots one in its own namespaces, in a lab host's network
// namespace): install, start that returns only once the API is ready, STATUS and journal, a
// SIGKILLed kctl restarted without duplicate components, a hung kctl restarted by the watchdog,
// a clean stop, uninstall, and the refusals.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { kctl } from '../lab/kctl.ts';
import { startLab } from '../lab/lab-test.ts';
import { bootSystemd, setWatchdog, type SystemdLab } from '../lab/systemd.ts';
import { waitFor } from '../../wait.ts';

const COMPONENTS = ['kine', 'kube-apiserver', 'kube-scheduler', 'kube-controller-manager'];

/** How many processes of each component run in the lab (its own pid namespace). */
async function counts(sd: SystemdLab): Promise<Record<string, number>> {
  const argv0 = String((await sd.exec('ps', ['-eo', 'args', '--no-headers'])).stdout)
    .split('\n')
    .map((l) => l.trim().split(' ')[0]!.split('/').pop());
  return Object.fromEntries(COMPONENTS.map((c) => [c, argv0.filter((a) => a === c).length]));
}

test('kctl install controller: a Type=notify service that is ready when started, restarts after a crash or a hang, stops cleanly', async (t: TestContext) => {
  // Not under /tmp: the systemd lab has its own /tmp.
  const { lab, dir, kctlBin } = await startLab(t, 'sv', ['ctl'], { dir: '/var/lib/kctl-test-service-' });
  const ctl = lab.host('ctl');
  const sd = await bootSystemd('kctl-svc', ctl.netns, t);
  const dataDir = join(dir, 'data');
  const runDir = join(dir, 'run');
  const cfg = join(dir, 'kctl.yaml');
  await writeFile(cfg, `spec:\n  api: { address: ${ctl.ip} }\n`);
  const inLab = (args: string[]) => sd.exec(kctlBin, ['--data-dir', dataDir, '--run-dir', runDir, ...args]);
  const systemctl = (...args: string[]) => sd.exec('systemctl', args);
  const journal = async () =>
    String((await sd.exec('journalctl', ['-u', 'kctl-controller', '--no-pager', '-o', 'cat'])).stdout);
  const tail = async () => (await journal()).split('\n').slice(-15).join('\n');
  const mainPid = async () =>
    Number(String((await systemctl('show', '-p', 'MainPID', '--value', 'kctl-controller')).stdout).trim());

  // Outside systemd (this host's PID 1 is not systemd): refused, nothing written.
  const outside = await kctl(['--data-dir', dataDir, 'install', 'controller', '--unit-dir', dir]);
  assert.notEqual(outside.exitCode, 0);
  assert.match(
    String(outside.stderr).trim(),
    /^kctl: systemd is not running as PID 1 here \(PID 1 is [^)]+\); run kctl controller/,
  );

  const installed = await inLab([
    'install',
    'controller',
    '--single',
    '--config',
    cfg,
    '--env',
    'KCTL_TEST_HANG_ON_SIGNAL=SIGUSR1',
  ]);
  assert.equal(installed.exitCode, 0, String(installed.stderr));
  const unit = String((await sd.exec('cat', ['/etc/systemd/system/kctl-controller.service'])).stdout);
  assert.match(unit, /^Type=notify$/m);
  assert.ok(
    unit.includes(`ExecStart=${kctlBin} controller --data-dir ${dataDir} --run-dir ${runDir} --config ${cfg} --single`),
    unit,
  );
  assert.equal(String((await systemctl('is-enabled', 'kctl-controller')).stdout).trim(), 'enabled');
  const again = await inLab(['install', 'controller', '--single', '--config', cfg]);
  assert.notEqual(again.exitCode, 0);
  assert.equal(
    String(again.stderr).trim(),
    'kctl: /etc/systemd/system/kctl-controller.service already exists; kctl uninstall first, or install --force to replace it',
  );
  // A short watchdog for this test (the unit's own is 60 s).
  await setWatchdog(sd, 'kctl-controller', 6);

  // 1. start returns once the API is ready; status shows kctl's STATUS; the journal has kctl's JSON lines.
  // kctl start / stop are systemctl on the installed unit.
  const started = await inLab(['start']);
  assert.equal(started.exitCode, 0, `${String(started.stderr)}\n${await tail()}`);
  const readyz = await inLab(['kubectl', 'get', '--raw', '/readyz']);
  assert.equal(String(readyz.stdout).trim(), 'ok', 'systemctl start returned before the API was ready');
  const status = String((await systemctl('status', '--no-pager', 'kctl-controller')).stdout);
  assert.match(
    status,
    new RegExp(`Status: "controller ready: API at https://${ctl.ip.replace(/\./g, '\\.')}:6443"`),
    status,
  );
  assert.match(await journal(), /"component":"manager".*"msg":"starting kube-apiserver"/);
  assert.match(await journal(), /"msg":"controller ready"/);
  assert.deepEqual(await counts(sd), {
    kine: 1,
    'kube-apiserver': 1,
    'kube-scheduler': 1,
    'kube-controller-manager': 1,
  });
  assert.equal((await inLab(['kubectl', 'create', 'configmap', 'survivor', '--from-literal=k=v'])).exitCode, 0);

  // 2. SIGKILL of kctl: systemd restarts it; ready again with the same data, one of each component.
  const first = await mainPid();
  await sd.exec('kill', ['-KILL', String(first)]);
  await waitFor(
    'a new kctl, active again',
    180_000,
    async () =>
      (await mainPid()) !== first &&
      (await mainPid()) > 0 &&
      String((await systemctl('is-active', 'kctl-controller')).stdout).trim() === 'active',
    tail,
  );
  assert.equal(
    String((await inLab(['kubectl', 'get', 'configmap', 'survivor', '-o', 'jsonpath={.data.k}'])).stdout),
    'v',
  );
  assert.deepEqual(await counts(sd), {
    kine: 1,
    'kube-apiserver': 1,
    'kube-scheduler': 1,
    'kube-controller-manager': 1,
  });

  // 5. A kctl whose event loop is blocked stops pinging: the watchdog restarts it.
  const second = await mainPid();
  await sd.exec('kill', ['-USR1', String(second)]);
  await waitFor(
    'the watchdog to restart kctl',
    180_000,
    async () =>
      (await mainPid()) !== second &&
      (await mainPid()) > 0 &&
      String((await systemctl('is-active', 'kctl-controller')).stdout).trim() === 'active',
    tail,
  );
  assert.match(await journal(), /blocking the event loop/);
  const sdLog = String((await sd.exec('journalctl', ['--no-pager', '-o', 'cat'])).stdout);
  assert.match(sdLog, /kctl-controller\.service: Watchdog timeout/);
  assert.deepEqual(await counts(sd), {
    kine: 1,
    'kube-apiserver': 1,
    'kube-scheduler': 1,
    'kube-controller-manager': 1,
  });

  // 3. stop: every process of the unit gone, inactive (not failed), components stopped in reverse.
  const stopped = await inLab(['stop']);
  assert.equal(stopped.exitCode, 0, String(stopped.stderr));
  assert.equal(String((await systemctl('is-active', 'kctl-controller')).stdout).trim(), 'inactive');
  assert.deepEqual(await counts(sd), {
    kine: 0,
    'kube-apiserver': 0,
    'kube-scheduler': 0,
    'kube-controller-manager': 0,
  });
  assert.equal(String((await sd.exec('pgrep', ['-c', '-f', `${kctlBin} controller`])).stdout).trim(), '0');
  const lines = (await journal()).split('\n');
  const at = (msg: string) => lines.findLastIndex((l) => l.includes(`"msg":"${msg}"`));
  assert.ok(
    at('stopping kube-apiserver') >= 0 &&
      at('stopping kube-apiserver') < at('stopping kine') &&
      at('stopping kine') < at('controller stopped'),
    await tail(),
  );

  // uninstall: unit gone, data stays; a second uninstall says there is nothing.
  const removed = await inLab(['uninstall']);
  assert.equal(removed.exitCode, 0, String(removed.stderr));
  assert.notEqual((await systemctl('cat', 'kctl-controller')).exitCode, 0);
  const none = await inLab(['uninstall']);
  assert.notEqual(none.exitCode, 0);
  assert.equal(
    String(none.stderr).trim(),
    'kctl: no kctl service is installed in /etc/systemd/system; run kctl install controller or kctl install worker first',
  );
});
