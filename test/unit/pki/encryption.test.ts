// The encryption config kctl writes for kube-apiserver: its shape, its keys, the file's mode and
// when it is (not) rewritten.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { parse } from 'yaml';
import { ensureEncryptionConfig, renderEncryptionConfig } from '../../../src/pki/encryption.ts';
import {
  encryptionConfigHash,
  newEncryptionKey,
  parseEncryptionKeys,
  readEncryptionKeys,
  PkiError,
} from '../../../src/pki/index.ts';
import { captureLogger, tempDir } from '../../helpers.ts';

interface Entry {
  resources: string[];
  providers: Record<string, { keys?: { name: string; secret: string }[] }>[];
}
const entries = (text: string) => (parse(text) as { kind: string; resources: Entry[] }).resources;
const providerNames = (e: Entry) => e.providers.map((p) => Object.keys(p)[0]);

test('the configured resources are written with the first key and read with every key or in plain text; all else is written plain', () => {
  const [a, b] = [
    newEncryptionKey(new Date('2026-01-01T00:00:00Z')),
    newEncryptionKey(new Date('2026-02-01T00:00:00Z')),
  ];
  assert.match(a.name, /^key-20260101T000000Z-[0-9a-f]{6}$/);
  assert.notEqual(
    newEncryptionKey(new Date('2026-01-01T00:00:00Z')).name,
    a.name,
    'two keys made in one second share a name',
  );
  assert.equal(Buffer.from(a.secret, 'base64').length, 32);
  assert.notEqual(a.secret, b.secret);
  const text = renderEncryptionConfig([a, b], ['secrets', 'widgets.example.com']);
  assert.equal((parse(text) as { kind: string }).kind, 'EncryptionConfiguration');
  const [mine, rest] = entries(text) as [Entry, Entry];
  assert.deepEqual(mine.resources, ['secrets', 'widgets.example.com']);
  assert.deepEqual(providerNames(mine), ['secretbox', 'identity']);
  assert.deepEqual(
    mine.providers[0]!.secretbox!.keys!.map((k) => k.name),
    [a.name, b.name],
  );
  // Last, so it masks nothing: what an earlier list encrypted stays readable.
  assert.deepEqual(rest.resources, ['*.*']);
  assert.deepEqual(providerNames(rest), ['identity', 'secretbox']);
  assert.deepEqual(parseEncryptionKeys(text), [a, b]);

  const plain = entries(renderEncryptionConfig([a], []));
  assert.equal(plain.length, 1, 'an empty list encrypts nothing');
  assert.deepEqual(providerNames(plain[0]!), ['identity', 'secretbox']);
  assert.throws(() => renderEncryptionConfig([], ['secrets']), /at least one key/);
});

test('the key is made once (0600), kept on every start, and the file follows the configured resources', async (t) => {
  const dir = await tempDir(t);
  const file = join(dir, 'encryption-config.yaml');
  const { log, raw } = captureLogger();
  assert.equal(await ensureEncryptionConfig(file, ['secrets'], log), 'created');
  assert.equal((await stat(file)).mode & 0o777, 0o600);
  const [key] = (await readEncryptionKeys(file))!;
  assert.equal(await ensureEncryptionConfig(file, ['secrets'], log), 'unchanged');
  assert.equal(await ensureEncryptionConfig(file, ['secrets', 'configmaps'], log), 'renewed');
  assert.deepEqual(await readEncryptionKeys(file), [key], 'the key was replaced');
  assert.deepEqual(entries(await readFile(file, 'utf8'))[0]!.resources, ['secrets', 'configmaps']);
  assert.ok(!raw().includes(key!.secret), 'the key reached the log');
  const text = await readFile(file);
  assert.equal(encryptionConfigHash(text), `sha256:${createHash('sha256').update(text).digest('hex')}`);
});

test('a damaged encryption config is refused with one line naming the file, and left as it is', async (t) => {
  const dir = await tempDir(t);
  const file = join(dir, 'encryption-config.yaml');
  const short = renderEncryptionConfig([{ name: 'key-a', secret: Buffer.alloc(16).toString('base64') }], ['secrets']);
  await writeFile(file, short, { mode: 0o600 });
  await assert.rejects(ensureEncryptionConfig(file, ['secrets'], captureLogger().log), (err: Error) => {
    assert.ok(err instanceof PkiError);
    assert.match(
      err.message,
      /encryption-config\.yaml is not a usable encryption config \(key key-a is not 32 bytes of base64\); restore it/,
    );
    return true;
  });
  assert.equal(await readFile(file, 'utf8'), short);
  await writeFile(file, 'kind: EncryptionConfiguration\n');
  await assert.rejects(readEncryptionKeys(file), /no secretbox keys/);
  assert.equal(await readEncryptionKeys(join(dir, 'absent.yaml')), null);
});
