// A worker that finds a kubelet serving certificate of the cluster CA (what an older kctl's
// controllers signed) removes it before kubelet starts, so kubelet asks for one from the
// kubelet-serving CA; one from any other CA stays.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, symlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { retireClusterCaServingCert } from '../../../src/worker/kubelet.ts';
import { workerPaths } from '../../../src/worker/paths.ts';
import { captureLogger, tempDir } from '../../helpers.ts';

function ca(dir: string, name: string): { crt: string; key: string } {
  const key = join(dir, `${name}.key`);
  const crt = join(dir, `${name}.crt`);
  execFileSync('openssl', [
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-keyout',
    key,
    '-out',
    crt,
    '-subj',
    `/CN=${name}`,
    '-days',
    '1',
  ]);
  return { crt, key };
}

function servingCert(dir: string, signer: { crt: string; key: string }, name: string): string {
  const key = join(dir, `${name}.key`);
  const csr = join(dir, `${name}.csr`);
  const crt = join(dir, `${name}.crt`);
  execFileSync('openssl', [
    'req',
    '-new',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-keyout',
    key,
    '-out',
    csr,
    '-subj',
    '/O=system:nodes/CN=system:node:w1',
  ]);
  execFileSync('openssl', ['x509', '-req', '-in', csr, '-CA', signer.crt, '-CAkey', signer.key, '-CAcreateserial', '-days', '1', '-out', crt]);
  return execFileSync('cat', [crt, key], { encoding: 'utf8' });
}

test('a kubelet serving certificate of the cluster CA is removed (link and file); one of the kubelet-serving CA stays', async (t) => {
  const dir = await tempDir(t);
  const paths = workerPaths(join(dir, 'data'), join(dir, 'run'));
  await mkdir(paths.kubeletCertDir, { recursive: true });
  await mkdir(dirname(paths.caCert), { recursive: true });
  const cluster = ca(dir, 'kubernetes-ca');
  const serving = ca(dir, 'kubelet-serving-ca');
  await writeFile(paths.caCert, execFileSync('cat', [cluster.crt]));
  const current = join(paths.kubeletCertDir, 'kubelet-server-current.pem');
  const log = captureLogger();

  assert.equal(await retireClusterCaServingCert(paths, log.log), false, 'no certificate yet');
  const newOne = join(paths.kubeletCertDir, 'kubelet-server-2026-01-01.pem');
  await writeFile(newOne, servingCert(dir, serving, 'new'));
  await symlink(newOne, current);
  assert.equal(await retireClusterCaServingCert(paths, log.log), false);
  assert.ok(existsSync(current) && existsSync(newOne), 'a kubelet-serving CA certificate stays');

  const old = join(paths.kubeletCertDir, 'kubelet-server-2025-01-01.pem');
  await writeFile(old, servingCert(dir, cluster, 'old'));
  execFileSync('ln', ['-sfn', old, current]);
  assert.equal(await retireClusterCaServingCert(paths, log.log), true);
  assert.equal(existsSync(current), false);
  assert.equal(existsSync(old), false);
  assert.ok(existsSync(newOne), 'other files are not touched');
  assert.ok(log.lines().some((l) => String(l.msg).startsWith('kubelet serving certificate was signed by the cluster CA')));
  assert.doesNotMatch(log.raw(), /PRIVATE KEY/);
});
