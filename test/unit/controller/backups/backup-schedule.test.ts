import assert from 'node:assert/strict';
import { chmod, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  archivesToPrune,
  archiveTime,
  BackupSchedulerComponent,
} from '../../../../src/controller/backups/backup-schedule.ts';
import { createBackupKey } from '../../../../src/controller/backups/backup-cipher.ts';
import { parseConfig } from '../../../../src/controller/config/config.ts';
import { controllerPaths } from '../../../../src/controller/config/paths.ts';
import { waitFor } from '../../../wait.ts';
import { captureLogger, tempDir } from '../../../helpers.ts';
import { fakeLeaseApi } from '../../kube/fake-apiserver.ts';
import { controllerLeaseName } from '../../../../src/kube/controller-leases.ts';

const stamp = (ms: number) => new Date(ms).toISOString().replace(/[:.]/g, '-');

test('spec.backup: no schedule means no scheduled backups; defaults; bad values name the field', () => {
  const none = parseConfig({}, 'kctl.yaml').spec.backup;
  assert.deepEqual(none, { retention: 7 });
  const b = parseConfig(
    {
      spec: {
        backup: { schedule: '6h', retention: 3, path: '/srv/backups', encryptionKeyFile: '/etc/kctl/backup.key' },
      },
    },
    'kctl.yaml',
  ).spec.backup;
  assert.deepEqual(b, {
    schedule: '6h',
    retention: 3,
    path: '/srv/backups',
    encryptionKeyFile: '/etc/kctl/backup.key',
  });
  assert.equal(parseConfig({ spec: { backup: { schedule: '1d' } } }, 'kctl.yaml').spec.backup.schedule, '1d');
  const bad = (backup: unknown) => () => parseConfig({ spec: { backup } }, 'kctl.yaml');
  assert.throws(
    bad({ schedule: '30s' }),
    /spec\.backup\.schedule: expected an interval of at least 1m, such as 6h, 30m or 1d/,
  );
  assert.throws(bad({ schedule: 'daily' }), /spec\.backup\.schedule: expected an interval/);
  assert.throws(bad({ retention: 0 }), /spec\.backup\.retention/);
  assert.throws(bad({ path: 'backups' }), /spec\.backup\.path: expected an absolute path/);
  assert.throws(bad({ encryptionKeyFile: 'k' }), /spec\.backup\.encryptionKeyFile: expected an absolute path/);
  assert.throws(bad({ encryption: true }), /spec\.backup: unknown field\(s\) "encryption"/);
});

test("retention: only kctl's archives, beyond the newest N, oldest first; partial files and others never", () => {
  const names = [
    'kctl-backup-2026-11-26T03-00-00-000Z.tar.gz.enc',
    'kctl-backup-2026-11-26T01-00-00-000Z.tar.gz',
    'kctl-backup-2026-11-26T04-00-00-000Z.tar.gz.enc',
    'kctl-backup-2026-11-26T02-00-00-000Z.tar.gz.enc',
    'kctl-backup-2026-11-26T00-00-00-000Z.tar.gz.enc.partial',
    'kctl-backup-2026-11-25T00-00-00-000Z.tar.gz.partial',
    '.kctl-backup-abc123',
    'notes.txt',
    'kctl-backup-2026-11-24T00-00-00-000Z.tar.gz.bak',
  ];
  assert.deepEqual(archivesToPrune(names, 2), [
    'kctl-backup-2026-11-26T01-00-00-000Z.tar.gz',
    'kctl-backup-2026-11-26T02-00-00-000Z.tar.gz.enc',
  ]);
  assert.deepEqual(archivesToPrune(names, 4), []);
  assert.deepEqual(archivesToPrune(names, 1).length, 3);
  assert.equal(archiveTime('kctl-backup-2026-11-26T03-04-05-678Z.tar.gz'), Date.parse('2026-11-26T03:04:05.678Z'));
  assert.equal(archiveTime('kctl-backup-2026-11-26T03-04-05-678Z.tar.gz.partial'), undefined);
});

test('the scheduler: the lease holder backs up one interval after start, keeps `retention`, retries a failure, publishes the result', async (t) => {
  const dir = await tempDir(t, 'kctl-backup-schedule-');
  const path = join(dir, 'backups');
  const key = join(dir, 'backup.key');
  await createBackupKey(key);
  const cfg = parseConfig(
    { spec: { api: { address: '10.0.0.1' }, backup: { schedule: '1m', retention: 2, path, encryptionKeyFile: key } } },
    'kctl.yaml',
  );
  const { kube } = await fakeLeaseApi(t);
  let now = Date.parse('2026-11-26T00:00:00.000Z');
  let fail = false;
  const calls: { savePath: string; key?: Buffer }[] = [];
  const backup = async (o: { savePath: string; key?: Buffer }) => {
    calls.push(o);
    if (fail) throw new Error('disk full');
    const file = join(o.savePath, `kctl-backup-${stamp(now)}.tar.gz.enc`);
    await writeFile(file, 'x', { mode: 0o600 });
    return file;
  };
  const other = join(path, 'notes.txt');
  const make = () =>
    new BackupSchedulerComponent({
      cfg,
      paths: controllerPaths(join(dir, 'data'), join(dir, 'run')),
      kube,
      identity: controllerLeaseName('10.0.0.1'),
      backup,
      now: () => now,
    });
  const s = make();
  const { log } = captureLogger();
  await s.init({ log, statuses: () => [] });
  await writeFile(other, 'not kctl');
  await s.start();
  t.after(() => s.stop());
  // The holder is published a moment before its first due time: wait for both.
  await waitFor(
    'the lease and the first due time',
    10_000,
    async () => s.report().leaseHolder === 'kctl-controller-10-0-0-1' && s.report().nextDue !== undefined,
  );
  assert.equal(s.report().nextDue, '2026-11-26T00:01:00.000Z', 'one interval after start when there is no archive');
  for (let i = 1; i <= 4; i++) {
    now += 60_000;
    await waitFor(
      `backup ${i}`,
      10_000,
      async () => calls.length === i && s.report().last?.at === new Date(now).toISOString(),
    );
    assert.equal(calls[i - 1]!.key?.length, 32, 'sealed with the key file');
  }
  const names = (await readdir(path)).sort();
  assert.deepEqual(names, [
    `kctl-backup-${stamp(now - 60_000)}.tar.gz.enc`,
    `kctl-backup-${stamp(now)}.tar.gz.enc`,
    'notes.txt',
  ]);
  assert.equal(s.report().last?.result, 'ok');

  fail = true;
  now += 60_000;
  await waitFor('the failed run', 10_000, async () => s.report().last?.result === 'failed');
  assert.equal(s.report().last?.reason, 'disk full');
  assert.match(s.status().lastError ?? '', /last backup failed: disk full/);
  assert.equal((await readdir(path)).length, 3, 'a failed run deletes nothing');
  fail = false;
  now += 60_000;
  await waitFor('the retry', 10_000, async () => s.report().last?.result === 'ok');
  assert.equal(s.status().lastError, undefined);

  // Another controller sees the holder and its last result through the lease, and does not back up.
  const o = new BackupSchedulerComponent({
    cfg: { ...cfg, spec: { ...cfg.spec, api: { ...cfg.spec.api, address: '10.0.0.2' } } },
    paths: controllerPaths(join(dir, 'data2'), join(dir, 'run2')),
    kube,
    identity: controllerLeaseName('10.0.0.2'),
    backup,
    now: () => now,
  });
  await o.init({ log, statuses: () => [] });
  await o.start();
  t.after(() => o.stop());
  // The clock moves on, so both renew: the holder publishes, the other reads.
  await waitFor('the other sees the lease', 10_000, async () => {
    now += 1_000;
    return o.report().last?.result === 'ok';
  });
  assert.equal(o.report().leaseHolder, 'kctl-controller-10-0-0-1');
  assert.equal(o.report().nextDue, undefined);
});

test('the scheduler refuses a key file that is open to others at init, with one line', async (t) => {
  const dir = await tempDir(t, 'kctl-backup-schedule-');
  const key = join(dir, 'backup.key');
  await createBackupKey(key);
  await chmod(key, 0o640);
  const cfg = parseConfig({ spec: { backup: { schedule: '1h', encryptionKeyFile: key } } }, 'kctl.yaml');
  const { kube } = await fakeLeaseApi(t);
  const s = new BackupSchedulerComponent({
    cfg,
    paths: controllerPaths(join(dir, 'data'), join(dir, 'run')),
    kube,
    identity: 'c1',
  });
  await assert.rejects(
    s.init({ log: captureLogger().log, statuses: () => [] }),
    /^Error: encryption key file .* is open to others \(mode 0640\); chmod 600 [^\n]*$/,
  );
});

test('without a key the scheduler warns once, at init', async (t) => {
  const dir = await tempDir(t, 'kctl-backup-schedule-');
  const cfg = parseConfig({ spec: { backup: { schedule: '1h' } } }, 'kctl.yaml');
  const { kube } = await fakeLeaseApi(t);
  const cap = captureLogger();
  await new BackupSchedulerComponent({
    cfg,
    paths: controllerPaths(join(dir, 'data'), join(dir, 'run')),
    kube,
    identity: 'c1',
  }).init({
    log: cap.log,
    statuses: () => [],
  });
  assert.equal(cap.lines().filter((l) => String(l.msg).includes('CA keys unencrypted')).length, 1);
});
