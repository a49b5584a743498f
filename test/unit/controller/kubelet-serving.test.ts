// Which CA a kubelet's serving certificate comes from (what the controller's check reports).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { servingIssuer } from '../../../src/controller/kubelet-serving.ts';
import { tempDir } from '../../helpers.ts';

const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

function ca(dir: string, name: string): { crt: string; key: string } {
  const key = join(dir, `${name}.key`);
  const crt = join(dir, `${name}.crt`);
  execFileSync('openssl', ['req', '-x509', ...ec, '-keyout', key, '-out', crt, '-subj', `/CN=${name}`, '-days', '1']);
  return { crt, key };
}

function leaf(dir: string, signer: { crt: string; key: string }, name: string): X509Certificate {
  const csr = join(dir, `${name}.csr`);
  const crt = join(dir, `${name}.crt`);
  execFileSync('openssl', ['req', '-new', ...ec, '-keyout', join(dir, `${name}.key`), '-out', csr, '-subj', '/O=system:nodes/CN=system:node:w1']);
  execFileSync('openssl', ['x509', '-req', '-in', csr, '-CA', signer.crt, '-CAkey', signer.key, '-CAcreateserial', '-days', '1', '-out', crt]);
  return new X509Certificate(readFileSync(crt));
}

test('a serving certificate is told apart by the CA whose key signed it, not by its issuer name', async (t) => {
  const dir = await tempDir(t);
  const serving = ca(dir, 'kubelet-serving-ca');
  const cluster = ca(dir, 'kubernetes-ca');
  // Same subject as the cluster CA, another key: a name is not a signature.
  const lookalike = ca(await tempDir(t), 'kubernetes-ca');
  const cert = (f: string) => new X509Certificate(readFileSync(f));
  const [s, c] = [cert(serving.crt), cert(cluster.crt)];
  assert.equal(servingIssuer(leaf(dir, serving, 'new'), s, c), 'kubelet-serving CA');
  assert.equal(servingIssuer(leaf(dir, cluster, 'old'), s, c), 'cluster CA');
  assert.equal(servingIssuer(leaf(dir, lookalike, 'forged'), s, c), 'another CA');
});
