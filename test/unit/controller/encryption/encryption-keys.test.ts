// The cluster's key set (a Secret in kube-system) and the steps of a rotation, against a fake API
// server with optimistic concurrency.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  addKey,
  dropOldKeys,
  KEYS_SECRET,
  KeySetRefused,
  keySetSigner,
  loadedConfigHash,
  promoteKey,
  readKeySet,
  readTrustedKeySet,
  resourcesToRewrite,
  rotationStep,
  unknownKeys,
  updateKeySet,
  writeKeySet,
  type KeySet,
} from '../../../../src/controller/encryption/encryption-keys.ts';
import { KubeClient } from '../../../../src/kube/client.ts';
import { bundleOf, newClusterCa, newEncryptionKey } from '../../../../src/pki/index.ts';
import { fakeApiServer } from '../../kube/fake-apiserver.ts';
import { fakeSecrets } from '../fake-secrets.ts';

const oldKey = newEncryptionKey(new Date('2026-01-01T00:00:00Z'));
const newKey = newEncryptionKey(new Date('2026-06-01T00:00:00Z'));

test('a rotation: add the new key second, make it first, then drop the old; each step knows the next', () => {
  let set: KeySet = { keys: [oldKey], encryptedResources: ['secrets'] };
  assert.equal(rotationStep(set), 'add');
  assert.throws(() => dropOldKeys(set), /only after the new key encrypts/);
  set = addKey(set, newKey);
  assert.deepEqual(
    set.keys.map((k) => k.name),
    [oldKey.name, newKey.name],
  );
  assert.equal(rotationStep(set), 'promote');
  assert.throws(() => dropOldKeys(set), /only after the new key encrypts/);
  set = promoteKey(set);
  assert.deepEqual(
    set.keys.map((k) => k.name),
    [newKey.name, oldKey.name],
  );
  assert.equal(rotationStep(set), 'rewrite');
  set = dropOldKeys(set);
  assert.deepEqual(set, {
    keys: [newKey],
    rotatingTo: undefined,
    encryptedResources: ['secrets'],
    retired: [oldKey.name],
  });
  assert.equal(rotationStep(set), 'add');
  assert.throws(() => promoteKey({ keys: [oldKey], rotatingTo: 'key-gone' }), /key-gone .* is not in the key set/);
});

test('a local key the cluster never had joins the set as a decryption key; a key a rotation dropped does not come back', () => {
  const own = newEncryptionKey();
  const set: KeySet = { keys: [newKey], retired: [oldKey.name] };
  assert.deepEqual(unknownKeys(set, [newKey]), []);
  assert.deepEqual(unknownKeys(set, [oldKey]), [], 'a controller that missed a rotation offered the dropped key back');
  assert.deepEqual(unknownKeys(set, [own, newKey]), [own]);
});

test('what a change of the configured resources rewrites: all at first, then what was added or removed', () => {
  assert.deepEqual(resourcesToRewrite(undefined, ['secrets']), ['secrets']);
  assert.deepEqual(resourcesToRewrite(['secrets'], ['secrets']), []);
  assert.deepEqual(resourcesToRewrite([], ['secrets']), ['secrets']);
  assert.deepEqual(resourcesToRewrite(['secrets'], []), ['secrets']);
  assert.deepEqual(resourcesToRewrite(['secrets', 'configmaps'], ['secrets', 'widgets.example.com']), [
    'widgets.example.com',
    'configmaps',
  ]);
});

const ca = await newClusterCa(new Date());
const trust = { caKey: ca.key, caBundle: ca.cert };

test('the key set round-trips through its Secret, and a writer that lost a race applies its change again', async (t) => {
  const { kube, secrets, conflicts } = await fakeSecrets(t);
  assert.equal(await readKeySet(kube), null);
  const made = await writeKeySet(kube, { keys: [oldKey] }, trust);
  assert.deepEqual((await readTrustedKeySet(kube, trust))?.keys, [oldKey]);
  assert.equal((await readKeySet(kube))?.encryptedResources, undefined);
  // What another controller writes (its rewrite recorded), kept aside to land between this one's read and write.
  const before = secrets.get(KEYS_SECRET)!;
  await writeKeySet(kube, { ...made, encryptedResources: ['secrets'] }, trust);
  const racer = secrets.get(KEYS_SECRET)!;
  secrets.set(KEYS_SECRET, before);
  let raced = false;
  const after = await updateKeySet(kube, trust, (s) => {
    if (!raced) {
      raced = true;
      secrets.set(KEYS_SECRET, { ...racer, metadata: { ...racer.metadata, resourceVersion: '99' } as never });
    }
    return addKey(s, newKey);
  });
  assert.equal(conflicts(), 1);
  assert.deepEqual(after.encryptedResources, ['secrets']);
  assert.equal(after.rotatingTo, newKey.name);
  assert.deepEqual(
    after.keys.map((k) => k.name),
    [oldKey.name, newKey.name],
  );
  assert.notEqual(made.resourceVersion, after.resourceVersion);
  // A damaged Secret never becomes a kube-apiserver config.
  const stored = secrets.get(KEYS_SECRET)!;
  secrets.set(KEYS_SECRET, {
    ...stored,
    data: { keys: Buffer.from('{"secretbox":[{"name":"key-x","secret":"c2hvcnQ="}]}').toString('base64') },
  });
  await assert.rejects(readKeySet(kube), /key key-x is not 32 bytes/);
});

test('the loaded config is read from kube-apiserver metrics; absent until it reports one', async (t) => {
  let body =
    '# HELP x\napiserver_encryption_config_controller_automatic_reloads_total{apiserver_id_hash="sha256:1",status="success"} 1\n';
  const api = await fakeApiServer(t, (req, res) => {
    assert.equal(req.path, '/metrics');
    res.writeHead(200, { 'content-type': 'text/plain' }).end(body);
  });
  const kube = new KubeClient({ server: api.url });
  assert.equal(await loadedConfigHash(kube), undefined);
  const hash = `sha256:${'ab'.repeat(32)}`;
  body += `apiserver_encryption_config_controller_last_config_info{apiserver_id_hash="sha256:${'0'.repeat(64)}",hash="${hash}"} 1\n`;
  assert.equal(await loadedConfigHash(kube), hash);
});

test('only a set a trusted CA signed is believed: unsigned, forged or changed after signing, it is refused and nothing is written', async (t) => {
  const { kube, secrets } = await fakeSecrets(t);
  const other = await newClusterCa(new Date());
  await writeKeySet(kube, { keys: [oldKey] }, { caKey: other.key, caBundle: other.cert });
  await assert.rejects(readTrustedKeySet(kube, trust), (err: unknown) => {
    assert.ok(err instanceof KeySetRefused);
    assert.equal(
      err.message,
      `the encryption key set in Secret kube-system/${KEYS_SECRET} is refused: its signature is not by a CA this controller trusts; the controllers keep the keys they have`,
    );
    return true;
  });
  await assert.rejects(
    updateKeySet(kube, trust, (s) => addKey(s, newKey)),
    KeySetRefused,
  );
  assert.deepEqual((await readKeySet(kube))?.keys, [oldKey], 'a refused set was changed');
  // Signed by the trusted CA, then a key added by someone without it: the signature no longer fits.
  await writeKeySet(kube, { ...(await readKeySet(kube))!, keys: [oldKey] }, trust);
  const signed = secrets.get(KEYS_SECRET)!;
  signed.data = { keys: Buffer.from(JSON.stringify({ secretbox: [oldKey, newKey] })).toString('base64') };
  await assert.rejects(readTrustedKeySet(kube, trust), /its signature is not by a CA this controller trusts/);
  // No signature at all (what an older kctl wrote).
  delete secrets.get(KEYS_SECRET)!.metadata.annotations?.['kctl.dev/key-set-signature'];
  await assert.rejects(readTrustedKeySet(kube, trust), /it carries no signature of the cluster CA/);
});

test('a CA rotation: a set signed by the old CA is still believed while both are trusted, and no longer once the old one is dropped', async (t) => {
  const { kube } = await fakeSecrets(t);
  const next = await newClusterCa(new Date());
  await writeKeySet(kube, { keys: [oldKey] }, trust);
  const signPhase = { caKey: next.key, caBundle: bundleOf([next.cert, ca.cert]) };
  const dropPhase = { caKey: next.key, caBundle: bundleOf([next.cert]) };
  assert.equal(keySetSigner((await readKeySet(kube))!, signPhase), 1, 'signed by the CA trusted but no longer signing');
  assert.equal(keySetSigner((await readKeySet(kube))!, dropPhase), -1);
  await writeKeySet(kube, (await readTrustedKeySet(kube, signPhase))!, signPhase);
  assert.equal(keySetSigner((await readKeySet(kube))!, signPhase), 0);
  assert.deepEqual((await readTrustedKeySet(kube, dropPhase))?.keys, [oldKey]);
});
