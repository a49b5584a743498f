// A worker that finds a kubelet serving certificate of the cluster CA (what an older kctl's
// controllers signed) removes it before kubelet starts, so kubelet asks for one from the
// kubelet-serving CA; one from any other CA stays.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, symlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { retireClusterCaServingCert } from '../../../src/worker/kubelet.ts';
import { workerPaths } from '../../../src/worker/paths.ts';
import { captureLogger, selfSignedCert, signedCert, tempDir } from '../../helpers.ts';

const NODE = '/O=system:nodes/CN=system:node:w1';
/** What kubelet keeps in kubelet-server-*.pem: the certificate, then its key. */
const servingPem = (c: { pem: string; key: string }): string => c.pem + readFileSync(c.key, 'utf8');

test('a kubelet serving certificate of the cluster CA is removed (link and file); one of the kubelet-serving CA stays', async (t) => {
  const dir = await tempDir(t);
  const paths = workerPaths(join(dir, 'data'), join(dir, 'run'));
  await mkdir(paths.kubeletCertDir, { recursive: true });
  await mkdir(dirname(paths.caCert), { recursive: true });
  const cluster = selfSignedCert(dir, 'kubernetes-ca', { cn: 'kubernetes-ca', ca: true });
  const serving = selfSignedCert(dir, 'kubelet-serving-ca', { cn: 'kubelet-serving-ca', ca: true });
  await writeFile(paths.caCert, cluster.pem);
  const current = join(paths.kubeletCertDir, 'kubelet-server-current.pem');
  const log = captureLogger();

  assert.equal(await retireClusterCaServingCert(paths, log.log), false, 'no certificate yet');
  const newOne = join(paths.kubeletCertDir, 'kubelet-server-2026-01-01.pem');
  await writeFile(newOne, servingPem(signedCert(dir, 'new', serving, NODE)));
  await symlink(newOne, current);
  assert.equal(await retireClusterCaServingCert(paths, log.log), false);
  assert.ok(existsSync(current) && existsSync(newOne), 'a kubelet-serving CA certificate stays');

  const old = join(paths.kubeletCertDir, 'kubelet-server-2025-01-01.pem');
  await writeFile(old, servingPem(signedCert(dir, 'old', cluster, NODE)));
  execFileSync('ln', ['-sfn', old, current]);
  assert.equal(await retireClusterCaServingCert(paths, log.log), true);
  assert.equal(existsSync(current), false);
  assert.equal(existsSync(old), false);
  assert.ok(existsSync(newOne), 'other files are not touched');
  assert.ok(
    log.lines().some((l) => String(l.msg).startsWith('kubelet serving certificate was signed by the cluster CA')),
  );
  assert.doesNotMatch(log.raw(), /PRIVATE KEY/);
});
