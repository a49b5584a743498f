// kctl sysinfo with real conditions: a port another process holds and a data dir on a tiny full
// tmpfs fail, and kctl controller refuses to start with the same line, writing nothing.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa } from 'execa';
import type { SysinfoReport } from '../../../src/cli/sysinfo.ts';
import { startLab } from '../lab/lab-test.ts';

test('sysinfo: -o json shape; a taken port and a full data dir fail, and kctl controller refuses with that line', async (t: TestContext) => {
  const { lab, dir, kctlBin } = await startLab(t, 'si', ['ctl'], { dir: 'kctl-sysinfo-' });
  const ctl = lab.host('ctl');
  const cfg = join(dir, 'kctl.yaml');
  await writeFile(cfg, `spec:\n  api: { address: ${ctl.ip} }\n`);
  const dataDir = join(dir, 'data');
  const runDir = join(dir, 'run');
  const sysinfo = async (...args: string[]) => {
    const r = await ctl.run(kctlBin, [
      '--data-dir',
      dataDir,
      '--run-dir',
      runDir,
      'sysinfo',
      '--config',
      cfg,
      '-o',
      'json',
      ...args,
    ]);
    return { code: r.exitCode, report: JSON.parse(String(r.stdout)) as SysinfoReport };
  };

  const clean = await sysinfo();
  assert.equal(clean.code, 0, JSON.stringify(clean.report.checks.filter((c) => c.result === 'fail')));
  assert.equal(clean.report.role, 'controller');
  assert.equal(clean.report.ok, true);
  for (const name of [
    'kernel',
    'cgroups',
    'port 6443',
    'port 8132',
    'disk',
    'inodes',
    'memory',
    'ip_forward',
    'clock',
    'systemd',
  ])
    assert.ok(
      clean.report.checks.some((c) => c.name === name && ['pass', 'warn'].includes(c.result) && c.detail.length > 0),
      `no ${name} check`,
    );
  const worker = await sysinfo('--role', 'worker');
  assert.ok(worker.report.checks.some((c) => c.name === 'port 10250'));
  assert.ok(worker.report.checks.some((c) => c.name === 'module overlay'));

  // Someone else on the API port.
  const squatter = ctl.spawn('/bin/busybox', ['nc', '-l', '-p', '6443']);
  let taken = await sysinfo();
  for (let i = 0; i < 20 && taken.code === 0; i++) {
    await sleep(100);
    taken = await sysinfo();
  }
  assert.equal(taken.code, 1);
  const port = taken.report.checks.find((c) => c.name === 'port 6443')!;
  assert.equal(port.result, 'fail');
  assert.match(port.detail, new RegExp(`^in use by pid ${squatter.pid} \\(busybox\\); kube-apiserver needs it`));
  const refused = await ctl.run(kctlBin, [
    '--data-dir',
    dataDir,
    '--run-dir',
    runDir,
    'controller',
    '--single',
    '--config',
    cfg,
  ]);
  assert.notEqual(refused.exitCode, 0);
  const lines = String(refused.stderr).trim().split('\n');
  assert.equal(lines.length, 1, String(refused.stderr));
  assert.ok(lines[0]!.startsWith(`kctl: host check failed: port 6443: ${port.detail}`), String(refused.stderr));
  assert.equal(existsSync(dataDir), false, 'a refused controller wrote its data dir');
  squatter.kill('SIGKILL');

  // A data dir on a tiny tmpfs that is full.
  const small = join(dir, 'small');
  await mkdir(small);
  assert.equal(
    (await execa('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'kctl-test', small], { reject: false })).exitCode,
    0,
  );
  try {
    await fullDataDir(small);
  } finally {
    await execa('umount', [small], { reject: false });
  }

  async function fullDataDir(small: string): Promise<void> {
    await execa('dd', ['if=/dev/zero', `of=${join(small, 'fill')}`, 'bs=1M', 'count=8'], { reject: false });
    const r = await ctl.run(kctlBin, [
      '--data-dir',
      join(small, 'data'),
      '--run-dir',
      runDir,
      'sysinfo',
      '--config',
      cfg,
      '-o',
      'json',
    ]);
    assert.equal(r.exitCode, 1);
    const diskCheck = (JSON.parse(String(r.stdout)) as SysinfoReport).checks.find((c) => c.name === 'disk')!;
    assert.equal(diskCheck.result, 'fail');
    assert.match(diskCheck.detail, new RegExp(`^0 MiB free under ${small}; the controller needs at least 1.0 GiB`));
    const full = await ctl.run(kctlBin, [
      '--data-dir',
      join(small, 'data'),
      '--run-dir',
      runDir,
      'controller',
      '--single',
      '--config',
      cfg,
    ]);
    assert.notEqual(full.exitCode, 0);
    assert.match(
      String(full.stderr).trim(),
      /^kctl: host check failed: disk: 0 MiB free under .*; kctl sysinfo --role controller shows every check$/,
    );
    assert.equal(existsSync(join(small, 'data')), false);
  }
});
