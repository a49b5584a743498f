// Tenants under a real systemd: kctl install controller --name writes one template unit
// (kctl-controller@.service) and a drop-in per tenant with its own flags; each instance (alpha a
// full cluster, beta api-only) starts ready, is restarted alone after a crash with the same ports
// and data, stops without leaving its components behind; the template goes with the last
// tenant's uninstall.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import type { TenantListEntry } from '../../../src/cli/tenant.ts';
import { startLab } from '../lab/lab-test.ts';
import { bootSystemd } from '../lab/systemd.ts';
import { waitFor } from '../../wait.ts';

test('kctl install controller --name: a template unit and an instance per tenant, each ready when started, restarted alone, stopped cleanly', async (t: TestContext) => {
  const { lab, dir, kctlBin } = await startLab(t, 'svt', ['ctl'], { dir: '/var/lib/kctl-test-svtenant-' }); // not /tmp: the systemd lab has its own
  const ctl = lab.host('ctl');
  const sd = await bootSystemd('kctl-svt', ctl.netns, t);
  const dataDir = join(dir, 'data');
  const runDir = join(dir, 'run');
  const cfg = join(dir, 'alpha.yaml');
  // alpha is a full cluster (scheduler, konnectivity server, join endpoint; etcd), beta api-only.
  await writeFile(cfg, `spec:\n  profile: full\n  api: { address: ${ctl.ip} }\n`);
  // The tenants' host-wide port claims in the test's own dir: a rerun within the claims' 10-minute
  // grace (a deleted tenant's claims stand that long) would otherwise find alpha's range taken.
  const hostStateDir = join(dir, 'host-state');
  const inLab = (args: string[]) =>
    sd.exec(kctlBin, ['--data-dir', dataDir, '--run-dir', runDir, '--host-state-dir', hostStateDir, ...args]);
  const systemctl = (...args: string[]) => sd.exec('systemctl', args);
  const mainPid = async (unit: string) =>
    Number(String((await systemctl('show', '-p', 'MainPID', '--value', unit)).stdout).trim());
  const running = async (program: string) =>
    String((await sd.exec('ps', ['-eo', 'args', '--no-headers'])).stdout)
      .split('\n')
      .filter((l) => l.trim().split(' ')[0]!.endsWith(`/${program}`)).length;
  const apiservers = () => running('kube-apiserver');
  const list = async () =>
    JSON.parse(String((await inLab(['tenant', 'list', '-o', 'json'])).stdout)) as TenantListEntry[];
  const journal = async (unit: string) =>
    String((await sd.exec('journalctl', ['-u', unit, '--no-pager', '-o', 'cat'])).stdout)
      .split('\n')
      .slice(-15)
      .join('\n');

  const alpha = await inLab([
    '--name',
    'alpha',
    'install',
    'controller',
    '--config',
    cfg,
    '--port-range',
    '17100-17109',
    '--env',
    'KCTL_TEST=1',
  ]);
  assert.equal(alpha.exitCode, 0, String(alpha.stderr));
  assert.match(
    String(alpha.stdout),
    /^installed kctl-controller@alpha\.service \(enabled\); start it with: kctl start --name alpha$/m,
  );
  const beta = await inLab(['--name', 'beta', 'install', 'controller', '--port-range', '17110-17119']);
  assert.equal(beta.exitCode, 0, String(beta.stderr));
  const template = String((await sd.exec('cat', ['/etc/systemd/system/kctl-controller@.service'])).stdout);
  assert.ok(
    template.includes(
      `ExecStart=${kctlBin} controller --data-dir ${dataDir} --run-dir ${runDir} --host-state-dir ${hostStateDir} --name %i`,
    ),
    template,
  );
  assert.match(template, /^Type=notify$/m);
  const dropIn = String(
    (await sd.exec('cat', ['/etc/systemd/system/kctl-controller@alpha.service.d/10-kctl.conf'])).stdout,
  );
  assert.match(dropIn, /^ExecStart=$/m);
  assert.ok(dropIn.includes(`--name alpha --config ${cfg} --port-range 17100-17109`), dropIn);
  assert.match(dropIn, /^Environment=KCTL_TEST=1$/m);
  for (const n of ['alpha', 'beta'])
    assert.equal(String((await systemctl('is-enabled', `kctl-controller@${n}`)).stdout).trim(), 'enabled');
  const again = await inLab(['--name', 'alpha', 'install', 'controller']);
  assert.notEqual(again.exitCode, 0);
  assert.equal(
    String(again.stderr).trim(),
    'kctl: kctl-controller@alpha.service is already installed; kctl uninstall --name alpha first, or install --force to replace it',
  );

  // start returns once each tenant's API is ready.
  for (const n of ['alpha', 'beta']) {
    const started = await inLab(['--name', n, 'start']);
    assert.equal(started.exitCode, 0, `${String(started.stderr)}\n${await journal(`kctl-controller@${n}`)}`);
    assert.equal(
      String((await inLab(['--name', n, 'kubectl', 'get', '--raw', '/readyz'])).stdout).trim(),
      'ok',
      `${n}: start returned before ready`,
    );
  }
  const tenants = await list();
  assert.deepEqual(
    tenants.map((e) => [e.name, e.profile, e.state, e.ports.api]),
    [
      ['alpha', 'full', 'running', 17100],
      ['beta', 'api-only', 'running', 17110],
    ],
  );
  assert.deepEqual(tenants[0]!.nodes, { ready: 0, total: 0 });
  const status = String((await systemctl('status', '--no-pager', 'kctl-controller@alpha')).stdout);
  assert.match(
    status,
    new RegExp(`Status: "controller ready: API at https://${ctl.ip.replace(/\./g, '\\.')}:17100"`),
    status,
  );
  assert.equal(await apiservers(), 2);
  assert.equal(await running('kube-scheduler'), 1, "alpha's scheduler");
  assert.equal(
    (await inLab(['--name', 'alpha', 'kubectl', 'create', 'configmap', 'survivor', '--from-literal=k=v'])).exitCode,
    0,
  );

  // alpha's kctl SIGKILLed: systemd restarts alpha alone, on the same port, with its data.
  const [a1, b1] = [await mainPid('kctl-controller@alpha'), await mainPid('kctl-controller@beta')];
  await sd.exec('kill', ['-KILL', String(a1)]);
  await waitFor(
    'alpha restarted and ready',
    180_000,
    async () => {
      const pid = await mainPid('kctl-controller@alpha');
      return (
        pid !== a1 &&
        pid > 0 &&
        String((await systemctl('is-active', 'kctl-controller@alpha')).stdout).trim() === 'active'
      );
    },
    () => journal('kctl-controller@alpha'),
  );
  assert.equal(await mainPid('kctl-controller@beta'), b1, 'beta was restarted too');
  assert.equal(
    String(
      (await inLab(['--name', 'alpha', 'kubectl', 'get', 'configmap', 'survivor', '-o', 'jsonpath={.data.k}'])).stdout,
    ),
    'v',
  );
  assert.deepEqual(
    (await list()).map((e) => e.ports),
    tenants.map((e) => e.ports),
  );
  assert.equal(await apiservers(), 2, 'a second kube-apiserver for alpha after the restart');

  // stop: alpha's components are gone, beta runs on.
  assert.equal((await inLab(['--name', 'alpha', 'stop'])).exitCode, 0);
  assert.equal(String((await systemctl('is-active', 'kctl-controller@alpha')).stdout).trim(), 'inactive');
  assert.equal(await apiservers(), 1);
  assert.deepEqual(
    [await running('kube-scheduler'), await running('etcd')],
    [0, 0],
    "alpha's scheduler or etcd left behind",
  );
  assert.deepEqual(
    (await list()).map((e) => [e.name, e.state]),
    [
      ['alpha', 'stopped'],
      ['beta', 'running'],
    ],
  );

  // uninstall: alpha's instance and drop-in go, the template stays for beta; it goes with beta's.
  const removedAlpha = await inLab(['--name', 'alpha', 'uninstall']);
  assert.equal(removedAlpha.exitCode, 0, String(removedAlpha.stderr));
  assert.equal((await sd.exec('test', ['-e', '/etc/systemd/system/kctl-controller@alpha.service.d'])).exitCode, 1);
  assert.equal((await sd.exec('test', ['-e', '/etc/systemd/system/kctl-controller@.service'])).exitCode, 0);
  const removedBeta = await inLab(['--name', 'beta', 'uninstall']);
  assert.equal(removedBeta.exitCode, 0, String(removedBeta.stderr));
  assert.equal((await sd.exec('test', ['-e', '/etc/systemd/system/kctl-controller@.service'])).exitCode, 1);
  assert.equal(await apiservers(), 0);
  const none = await inLab(['--name', 'beta', 'start']);
  assert.equal(
    String(none.stderr).trim(),
    'kctl: kctl-controller@beta.service is not installed in /etc/systemd/system; run kctl install controller --name beta first',
  );
});
