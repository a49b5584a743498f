import assert from 'node:assert/strict';
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { parse } from 'yaml';
import { readKubeconfig, writeKubeconfig } from '../../../src/pki/index.ts';
import { tempDir } from '../../helpers.ts';

const caPem = '-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n';

test('writeKubeconfig writes a 0600 self-contained kubeconfig, atomically', async (t) => {
  const dir = await tempDir(t);
  const path = join(dir, 'bootstrap.conf');
  await writeKubeconfig(path, {
    server: 'https://[2001:db8::1]:6443',
    caPem,
    user: 'kubelet-bootstrap',
    token: 'abcdef.0123456789abcdef',
  });
  assert.equal((await stat(path)).mode & 0o777, 0o600);
  assert.deepEqual(await readdir(dir), ['bootstrap.conf'], 'no temp file left behind');

  const doc = parse(await readFile(path, 'utf8')) as Record<string, unknown>;
  assert.equal(doc.kind, 'Config');
  assert.equal(doc['current-context'], 'kubelet-bootstrap@kubernetes');
  assert.deepEqual(readKubeconfig(await readFile(path, 'utf8'), path), {
    server: 'https://[2001:db8::1]:6443',
    caPem,
    user: 'kubelet-bootstrap',
    certPem: undefined,
    keyPem: undefined,
    token: 'abcdef.0123456789abcdef',
  });

  // Overwrite in place with a client cert instead.
  await writeKubeconfig(path, {
    server: 'https://192.0.2.1:6443',
    caPem,
    user: 'admin',
    certPem: 'CERT',
    keyPem: 'KEY',
  });
  const kc = readKubeconfig(await readFile(path, 'utf8'), path);
  assert.equal(kc.certPem, 'CERT');
  assert.equal(kc.keyPem, 'KEY');
  assert.equal(kc.token, undefined);
  assert.equal((await stat(path)).mode & 0o777, 0o600);
});

test('writeKubeconfig refuses a kubeconfig without credentials', async (t) => {
  const path = join(await tempDir(t), 'x.conf');
  await assert.rejects(
    writeKubeconfig(path, { server: 'https://a:1', caPem, user: 'u' }),
    /client certificate or a token/,
  );
  await assert.rejects(
    writeKubeconfig(path, { server: 'https://a:1', caPem, user: 'u', certPem: 'C' }),
    /both certPem and keyPem/,
  );
  await assert.rejects(stat(path), { code: 'ENOENT' });
});
