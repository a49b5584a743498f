// The shared CAs and keys kept outside the data dir (kctl pki save-shared, kctl controller
// --shared-pki): saved with flat names and private modes, taken into an empty data dir, accepted
// again when the data dir holds the same ones, and refused, with nothing written, when a file is
// missing or the data dir holds another cluster's.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { adoptSharedPki, saveSharedPki } from '../../../../src/controller/pki/shared-pki.ts';
import { SHARED_PKI_FILES, sharedPkiFilesFor, sharedPkiName } from '../../../../src/pki/paths.ts';
import { captureLogger, tempDir } from '../../../helpers.ts';

async function clusterPki(dir: string, tag: string): Promise<void> {
  for (const f of SHARED_PKI_FILES) {
    await mkdir(dirname(join(dir, f)), { recursive: true });
    await writeFile(join(dir, f), `${tag} ${f}`);
  }
}

test('save-shared writes every shared file flat and private; --shared-pki takes them into an empty data dir and again into the same one', async (t) => {
  const dir = await tempDir(t);
  await clusterPki(join(dir, 'a-pki'), 'a');
  const names = await saveSharedPki(join(dir, 'a-pki'), join(dir, 'secret'));
  assert.ok(names.includes('etcd-ca.key') && !names.some((n) => n.includes('/')), names.join(' '));
  assert.equal((await stat(join(dir, 'secret'))).mode & 0o777, 0o700);
  assert.equal((await stat(join(dir, 'secret', 'ca.key'))).mode & 0o777, 0o600);
  assert.equal((await stat(join(dir, 'secret', 'encryption-config.yaml'))).mode & 0o777, 0o600);
  assert.equal((await stat(join(dir, 'secret', 'ca.crt'))).mode & 0o777, 0o644);

  const { log, lines } = captureLogger();
  const pod = join(dir, 'pod-pki');
  await adoptSharedPki(join(dir, 'secret'), pod, SHARED_PKI_FILES, log);
  for (const f of SHARED_PKI_FILES) assert.equal(await readFile(join(pod, f), 'utf8'), `a ${f}`);
  assert.equal((await stat(join(pod, 'etcd', 'ca.key'))).mode & 0o777, 0o600);
  assert.ok(lines().some((l) => String(l.msg).includes('--shared-pki')));
  // The next start of the same data dir: the same files, accepted.
  await adoptSharedPki(join(dir, 'secret'), pod, SHARED_PKI_FILES, log);
});

test("--shared-pki refuses a data dir that holds another cluster's CA, and a set with a file missing, writing nothing", async (t) => {
  const dir = await tempDir(t);
  await clusterPki(join(dir, 'a-pki'), 'a');
  await saveSharedPki(join(dir, 'a-pki'), join(dir, 'secret'));
  const other = join(dir, 'b-pki');
  await clusterPki(other, 'b');
  await rm(join(other, 'sa.key'));
  const { log } = captureLogger();
  await assert.rejects(
    adoptSharedPki(join(dir, 'secret'), other, SHARED_PKI_FILES, log),
    /holds other ca\.crt, ca\.key, .* than --shared-pki/,
  );
  // Nothing of a's was written, not even where b had no file.
  assert.equal(existsSync(join(other, 'sa.key')), false);
  assert.equal(await readFile(join(other, 'ca.key'), 'utf8'), 'b ca.key');

  await rm(join(dir, 'secret', sharedPkiName('etcd/ca.key')));
  const empty = join(dir, 'empty-pki');
  await assert.rejects(
    adoptSharedPki(join(dir, 'secret'), empty, SHARED_PKI_FILES, log),
    /lacks etcd-ca\.key; write the whole set/,
  );
  assert.equal(existsSync(empty), false);
  await assert.rejects(saveSharedPki(join(dir, 'nowhere'), join(dir, 'out')), /has no ca\.crt, .*--init-only/);
});

test('an api-only control plane on kine has seven shared files: save-shared writes those, and --shared-pki needs no more', async (t) => {
  const dir = await tempDir(t);
  const apiOnly = sharedPkiFilesFor({ etcd: false });
  assert.deepEqual(apiOnly, [
    'ca.crt',
    'ca.key',
    'front-proxy-ca.crt',
    'front-proxy-ca.key',
    'sa.key',
    'sa.pub',
    'encryption-config.yaml',
  ]);
  assert.deepEqual(sharedPkiFilesFor({ etcd: true }), [
    ...apiOnly.slice(0, 6),
    'etcd/ca.crt',
    'etcd/ca.key',
    'encryption-config.yaml',
  ]);
  assert.deepEqual(sharedPkiFilesFor(), [...SHARED_PKI_FILES]);
  await clusterPki(join(dir, 'a-pki'), 'a');
  for (const f of SHARED_PKI_FILES.filter((f) => !apiOnly.includes(f))) await rm(join(dir, 'a-pki', f));
  assert.deepEqual(await saveSharedPki(join(dir, 'a-pki'), join(dir, 'secret')), apiOnly);
  const { log } = captureLogger();
  await adoptSharedPki(join(dir, 'secret'), join(dir, 'pod'), apiOnly, log);
  assert.equal(await readFile(join(dir, 'pod', 'sa.key'), 'utf8'), 'a sa.key');
  // A full cluster's control plane needs the rest: refused.
  await assert.rejects(
    adoptSharedPki(join(dir, 'secret'), join(dir, 'full'), SHARED_PKI_FILES, log),
    /lacks etcd-ca\.crt, etcd-ca\.key, addons-ca/,
  );
});
