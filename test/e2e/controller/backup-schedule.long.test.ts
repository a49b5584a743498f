// Scheduled, encrypted backups on a real controller (kine on SQLite): with schedule 1m and
// retention 3, after five minutes exactly the newest three archives are left, each sealed with
// the key; status shows the last backup ok and this controller as the lease holder. One archive
// is restored into a fresh data dir and a controller started from it serves the ConfigMap made
// before; without the key, with another key, or altered by one byte, restore is refused with one
// line and writes nothing.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa } from 'execa';
import type { ControllerStatusReport } from '../../../src/controller/leases/status.ts';
import { controllerLeaseName } from '../../../src/kube/controller-leases.ts';
import { controllerReady, labController, track, type Tracked } from '../lab/cluster.ts';
import { startLab } from '../lab/lab-test.ts';

const ARCHIVE = /^kctl-backup-[0-9TZ-]+\.tar\.gz\.enc$/;

async function stop(p: Tracked): Promise<void> {
  p.child.kill('SIGTERM');
  assert.equal(await p.exited, 0, p.log());
}

test('scheduled encrypted backups: retention keeps three, status shows the last, one restores; no key, another key or one altered byte: refused', async (t: TestContext) => {
  const { lab, dir, kctlBin } = await startLab(t, 'bksch', ['ctl'], { dir: 'kctl-backup-schedule-' });
  const ctl = lab.host('ctl');
  const c = await labController(kctlBin, ctl, dir);
  const g = ['--data-dir', c.dataDir, '--run-dir', c.runDir];
  const keyFile = join(dir, 'backup.key');
  const made = await ctl.run(kctlBin, ['backup', 'key', 'create', keyFile]);
  assert.equal(made.exitCode, 0, String(made.stderr));
  assert.equal((await stat(keyFile)).mode & 0o777, 0o600);
  const backups = join(dir, 'backups');
  await writeFile(
    join(dir, 'kctl.yaml'),
    `spec:\n  api: { address: ${ctl.ip} }\n  backup: { schedule: 1m, retention: 3, path: ${backups}, encryptionKeyFile: ${keyFile} }\n`,
  );
  const controller = track(ctl.spawn(kctlBin, c.args));
  await controllerReady(controller);
  assert.equal((await c.kubectl(['create', 'configmap', 'precious', '--from-literal=k=v'])).exitCode, 0);

  // Five minutes of a 1m schedule: four or five runs, every archive seen on the way.
  const seen = new Set<string>();
  const until = Date.now() + 5 * 60_000;
  while (Date.now() < until) {
    for (const name of await readdir(backups).catch(() => [])) if (ARCHIVE.test(name)) seen.add(name);
    await sleep(3_000);
  }
  const status = JSON.parse(
    String((await ctl.run(kctlBin, [...g, 'status', '-o', 'json'])).stdout),
  ) as ControllerStatusReport;
  const b = status.backup;
  assert.ok(b, 'status has no backup section');
  assert.equal(b.last?.result, 'ok', JSON.stringify(b));
  assert.match(b.last?.file ?? '', archivePath(backups));
  assert.equal(b.leaseHolder, controllerLeaseName(ctl.ip));
  assert.equal(b.encrypted, true);
  assert.ok(b.nextDue && Date.parse(b.nextDue) > Date.parse(b.last!.at), JSON.stringify(b));
  const text = String((await ctl.run(kctlBin, [...g, 'status'])).stdout);
  assert.match(text, new RegExp(`Backups: every 1m, keep 3, encrypted, in ${backups}`));
  assert.match(text, /last: +\S+ +ok +\S+\.tar\.gz\.enc/);

  // Stopped, so no run is half-way: exactly the newest three archives, nothing else.
  await stop(controller);
  const left = (await readdir(backups)).sort();
  // A run may have finished between the last look and the stop.
  for (const name of left) if (ARCHIVE.test(name)) seen.add(name);
  assert.ok(seen.size >= 4, `only ${seen.size} backups in five minutes: ${[...seen].join(', ')}`);
  assert.deepEqual(left, [...seen].sort().slice(-3), `seen: ${[...seen].sort().join(', ')}`);
  for (const name of left) assert.equal((await stat(join(backups, name))).mode & 0o777, 0o600, name);
  const archive = join(backups, left[1]!);
  assert.equal((await readFile(archive)).subarray(0, 8).toString(), 'KCTL-ENC');
  assert.notEqual(
    (await execa('tar', ['-tzf', archive], { reject: false })).exitCode,
    0,
    'tar read an encrypted archive',
  );

  // Refusals: one line each, the target data dir never made, no staging left beside it.
  const target = join(dir, 'restored');
  const rg = ['--data-dir', target, '--run-dir', join(dir, 'restored-run')];
  const otherKey = join(dir, 'other.key');
  assert.equal((await ctl.run(kctlBin, ['backup', 'key', 'create', otherKey])).exitCode, 0);
  const tampered = join(dir, 'tampered.tar.gz.enc');
  const bytes = await readFile(archive);
  bytes[Math.floor(bytes.length / 2)]! ^= 0x01;
  await writeFile(tampered, bytes, { mode: 0o600 });
  for (const [args, why] of [
    [[archive], /is encrypted; give its key with --encryption-key-file FILE; nothing was restored$/],
    [
      [archive, '--encryption-key-file', otherKey],
      /cannot be decrypted: the encryption key file does not match it .*; nothing was restored$/,
    ],
    [
      [tampered, '--encryption-key-file', keyFile],
      /cannot be decrypted: chunk \d+ does not authenticate: altered; nothing was restored$/,
    ],
  ] as const) {
    const r = await ctl.run(kctlBin, [...rg, 'restore', ...args]);
    assert.notEqual(r.exitCode, 0);
    const lines = String(r.stderr).trim().split('\n');
    assert.equal(lines.length, 1, String(r.stderr));
    assert.match(lines[0]!, why);
    assert.equal(existsSync(target), false, 'a refused restore made the data dir');
    assert.deepEqual(
      (await readdir(dir)).filter((n) => n.startsWith('.kctl-restore-')),
      [],
      'staging left behind',
    );
  }

  // The middle archive restores, and a controller started from it serves what was made before.
  const restored = await ctl.run(kctlBin, [...rg, 'restore', archive, '--encryption-key-file', keyFile]);
  assert.equal(restored.exitCode, 0, String(restored.stderr));
  const args = [...c.args];
  args.splice(args.indexOf('--data-dir'), 2, '--data-dir', target);
  args.splice(args.indexOf('--run-dir'), 2, '--run-dir', join(dir, 'restored-run'));
  const back = track(ctl.spawn(kctlBin, args));
  await controllerReady(back, 'controller ready after restore');
  const cm = await ctl.run(
    kctlBin,
    ['--data-dir', target, 'kubectl', 'get', 'configmap', 'precious', '-o', 'jsonpath={.data.k}'],
    {
      timeout: 60_000,
    },
  );
  assert.equal(String(cm.stdout), 'v', String(cm.stderr));
  await stop(back);
});

function archivePath(dir: string): RegExp {
  return new RegExp(`^${dir}/kctl-backup-[0-9TZ-]+\\.tar\\.gz\\.enc$`);
}
