// kctl backup / restore with the real datastores: a cluster with objects (etcd with a joined
// worker running a pod; kine on SQLite) is backed up, reset, restored and started again: the
// objects are back, its Secrets (stored encrypted, read around kube-apiserver) readable with the
// key the archive carries, and the worker carries on with its old credentials. Damaged archives and
// bad paths are refused with one line and write nothing.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readdir, readFile, stat, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { execa } from 'execa';
import {
  controllerReady,
  labController,
  nodeReady,
  runPinnedPod,
  startLabWorker,
  track,
  type Tracked,
} from '../lab/cluster.ts';
import { requireKctl } from '../lab/kctl.ts';
import { type LabHost } from '../lab/lab.ts';
import { startLab } from '../lab/lab-test.ts';
import { waitFor } from '../../wait.ts';
import { etcdRaw, sqliteRaw } from '../lab/datastore.ts';

/** Creates a Secret and returns a check that reads it back through kube-apiserver. */
async function secretKept(
  c: Awaited<ReturnType<typeof labController>>,
  name: string,
  value: string,
): Promise<() => Promise<void>> {
  assert.equal((await c.kubectl(['create', 'secret', 'generic', name, `--from-literal=v=${value}`])).exitCode, 0);
  return async () => {
    const got = await c.kubectl(['get', 'secret', name, '-o', 'jsonpath={.data.v}']);
    assert.equal(
      Buffer.from(String(got.stdout), 'base64').toString(),
      value,
      `Secret ${name} after restore: ${String(got.stderr)}`,
    );
  };
}

/** Encrypted at rest: the stored bytes start with the provider prefix and do not hold the value. */
function assertEncrypted(raw: Buffer | null, value: string): void {
  assert.ok(raw, 'the Secret is not in the datastore');
  assert.equal(raw.subarray(0, 21).toString(), 'k8s:enc:secretbox:v1:');
  assert.ok(!raw.includes(value), 'the stored Secret holds its value in plain text');
}

async function stop(p: Tracked): Promise<void> {
  p.child.kill('SIGTERM');
  assert.equal(await p.exited, 0, p.log());
}

/** Backs up, resets, restores and restarts the controller; returns the restarted process. */
async function roundTrip(
  ctl: LabHost,
  dir: string,
  c: Awaited<ReturnType<typeof labController>>,
  running: Tracked,
): Promise<Tracked> {
  const kctlBin = requireKctl();
  const g = ['--data-dir', c.dataDir, '--run-dir', c.runDir];
  const saveDir = join(dir, 'backups');
  await mkdir(saveDir);
  const b = await ctl.run(kctlBin, [...g, 'backup', '--save-path', saveDir]);
  assert.equal(b.exitCode, 0, String(b.stderr));
  const archive = String(b.stdout).trim();
  assert.match(archive, new RegExp(`^${saveDir}/kctl-backup-[0-9TZ-]+\\.tar\\.gz$`));
  // Without a key: one warning that the CA keys are in the clear, once.
  assert.equal(String(b.stderr).match(/CA keys unencrypted/g)?.length, 1, String(b.stderr));
  assert.equal((await stat(archive)).mode & 0o777, 0o600);
  assert.deepEqual(await readdir(saveDir), [archive.split('/').pop()], 'temporary files left next to the archive');
  const listing = String((await execa('tar', ['-tzf', archive])).stdout);
  assert.match(listing, /^manifest\.json$/m);
  assert.match(listing, /^pki\/ca\.key$/m);
  // The encryption key goes along: without it the restored Secrets could not be read.
  assert.match(listing, /^pki\/encryption-config\.yaml$/m);

  await stop(running);
  const reset = await ctl.run(kctlBin, [...g, 'reset']);
  assert.equal(reset.exitCode, 0, String(reset.stderr));
  assert.equal(existsSync(c.dataDir), false);

  // Damaged archives first: refused with one line, the data dir untouched.
  const truncated = join(dir, 'truncated.tar.gz');
  await writeFile(truncated, await readFile(archive));
  await truncate(truncated, Math.floor((await stat(archive)).size / 2));
  const tampered = join(dir, 'tampered');
  await mkdir(tampered);
  await execa('tar', ['-xzf', archive, '-C', tampered]);
  await writeFile(join(tampered, 'cluster-config.yaml'), '# edited\n', { flag: 'a' });
  await execa('tar', ['-czf', join(dir, 'tampered.tar.gz'), '-C', tampered, '.']);
  for (const [bad, why] of [
    [truncated, /it does not unpack .*truncated or corrupt; nothing was restored$/],
    [
      join(dir, 'tampered.tar.gz'),
      /cluster-config\.yaml does not match its sha256 \(altered or damaged\); nothing was restored$/,
    ],
  ] as const) {
    const r = await ctl.run(kctlBin, [...g, 'restore', bad]);
    assert.notEqual(r.exitCode, 0);
    const lines = String(r.stderr).trim().split('\n');
    assert.equal(lines.length, 1, String(r.stderr));
    assert.match(lines[0]!, why);
    assert.equal(existsSync(c.dataDir), false, 'a refused restore wrote the data dir');
  }

  // Into an emptied data dir, restore stages the controller's binaries first (etcdutl): on a loaded
  // machine that alone took over a minute, past the lab's default command timeout.
  const restored = await ctl.run(kctlBin, [...g, 'restore', archive], { timeout: 300_000 });
  assert.equal(restored.exitCode, 0, String(restored.stderr));
  const again = await ctl.run(kctlBin, [...g, 'restore', archive]);
  assert.notEqual(again.exitCode, 0);
  assert.match(String(again.stderr).trim(), /is not empty; restore goes into an empty data dir only/);
  assert.equal((await stat(join(c.dataDir, 'pki/ca.key'))).mode & 0o777, 0o600);

  const back = track(ctl.spawn(kctlBin, c.args));
  await controllerReady(back, 'controller ready after restore');
  return back;
}

test('backup, reset, restore with etcd: objects are back and the joined worker carries on without a new token', async (t: TestContext) => {
  const { lab, dir, kctlBin } = await startLab(t, 'bk', ['ctl', 'w1'], { dir: 'kctl-backup-', workers: ['w1'] });
  const [ctl, w1] = [lab.host('ctl'), lab.host('w1')];
  const c = await labController(kctlBin, ctl, dir);
  c.args.splice(c.args.indexOf('--single'), 1, '--storage', 'etcd');
  const controller = track(ctl.spawn(kctlBin, c.args));
  await controllerReady(controller);

  // Bad save paths: one line each, nothing written.
  for (const [path, why] of [
    [join(dir, 'missing'), /--save-path .*missing is not a directory/],
    [c.args[c.args.indexOf('--config') + 1]!, /is not a directory/],
  ] as const) {
    const r = await ctl.run(kctlBin, ['--data-dir', c.dataDir, '--run-dir', c.runDir, 'backup', '--save-path', path]);
    assert.notEqual(r.exitCode, 0);
    assert.match(String(r.stderr).trim(), why);
  }

  await lab.isolate(w1, ctl);
  const token = await c.createToken('1h');
  const worker = startLabWorker(kctlBin, w1, dir, token);
  await waitFor('w1 Ready', 300_000, () => nodeReady(c.kubectl, 'w1'), worker.log);
  await runPinnedPod(c.kubectl, 'keeper', 'w1', 'kept');
  assert.equal((await c.kubectl(['create', 'configmap', 'precious', '--from-literal=k=v'])).exitCode, 0);
  const secretBack = await secretKept(c, 'vault', 'etcd-secret-value');
  assertEncrypted(await etcdRaw(ctl, c.dataDir, '/registry/secrets/default/vault'), 'etcd-secret-value');

  await roundTrip(ctl, dir, c, controller);
  await secretBack();
  assert.equal(String((await c.kubectl(['get', 'configmap', 'precious', '-o', 'jsonpath={.data.k}'])).stdout), 'v');
  // The worker never stopped: with its old credentials it is Ready again, and the tunnel is back.
  await waitFor('w1 Ready after restore', 120_000, () => nodeReady(c.kubectl, 'w1'), worker.log);
  assert.equal(worker.child.exitCode, null, 'the worker exited');
  await waitFor('logs through the tunnel', 60_000, async () =>
    String((await c.kubectl(['logs', 'keeper'])).stdout).includes('kept'),
  );
});

test('backup, reset, restore with kine on SQLite: objects are back', async (t: TestContext) => {
  const { lab, dir, kctlBin } = await startLab(t, 'bs', ['ctl'], { dir: 'kctl-backup-sqlite-' });
  const ctl = lab.host('ctl');
  const c = await labController(kctlBin, ctl, dir);
  const controller = track(ctl.spawn(kctlBin, c.args));
  await controllerReady(controller);
  for (let i = 0; i < 20; i++)
    assert.equal((await c.kubectl(['create', 'configmap', `cm-${i}`, `--from-literal=i=${i}`])).exitCode, 0);
  const secretBack = await secretKept(c, 'vault', 'sqlite-secret-value');
  assertEncrypted(sqliteRaw(c.dataDir, '/registry/secrets/default/vault'), 'sqlite-secret-value');
  await roundTrip(ctl, dir, c, controller);
  await secretBack();
  const names = String(
    (await c.kubectl(['get', 'configmaps', '-o', 'jsonpath={.items[*].metadata.name}'])).stdout,
  ).split(' ');
  for (let i = 0; i < 20; i++) assert.ok(names.includes(`cm-${i}`), `cm-${i} is missing after restore`);

  // --encryption-key-file on the manual command: a key open to others is refused with one line
  // and nothing written; a good one seals the archive (into <data-dir>/backups by default), which
  // restore will not read without the key.
  const g = ['--data-dir', c.dataDir, '--run-dir', c.runDir];
  const key = join(dir, 'backup.key');
  assert.equal((await ctl.run(kctlBin, ['backup', 'key', 'create', key])).exitCode, 0);
  const again = await ctl.run(kctlBin, ['backup', 'key', 'create', key]);
  assert.match(String(again.stderr).trim(), /exists; a key is never replaced/);
  await chmod(key, 0o644);
  const open = await ctl.run(kctlBin, [...g, 'backup', '--encryption-key-file', key]);
  assert.notEqual(open.exitCode, 0);
  assert.deepEqual(String(open.stderr).trim().split('\n').length, 1, String(open.stderr));
  assert.match(
    String(open.stderr).trim(),
    /encryption key file .*backup\.key is open to others \(mode 0644\); chmod 600 /,
  );
  assert.equal(existsSync(join(c.dataDir, 'backups')), false, 'a refused backup made its directory');
  await chmod(key, 0o600);
  const sealed = await ctl.run(kctlBin, [...g, 'backup', '--encryption-key-file', key]);
  assert.equal(sealed.exitCode, 0, String(sealed.stderr));
  assert.doesNotMatch(String(sealed.stderr), /unencrypted/);
  const file = String(sealed.stdout).trim();
  assert.match(file, new RegExp(`^${c.dataDir}/backups/kctl-backup-[0-9TZ-]+\\.tar\\.gz\\.enc$`));
  assert.equal((await stat(file)).mode & 0o777, 0o600);
  assert.equal((await readFile(file)).subarray(0, 8).toString(), 'KCTL-ENC');
  const fresh = join(dir, 'fresh');
  const noKey = await ctl.run(kctlBin, ['--data-dir', fresh, 'restore', file]);
  assert.notEqual(noKey.exitCode, 0);
  assert.match(
    String(noKey.stderr).trim(),
    /is encrypted; give its key with --encryption-key-file FILE; nothing was restored$/,
  );
  assert.equal(existsSync(fresh), false);
});
