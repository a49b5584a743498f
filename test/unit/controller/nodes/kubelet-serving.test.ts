// Which CA a kubelet's serving certificate comes from (what the controller's check reports).
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { test } from 'node:test';
import { servingIssuer } from '../../../../src/controller/nodes/kubelet-serving.ts';
import { selfSignedCert, signedCert, tempDir } from '../../../helpers.ts';

test('a serving certificate is told apart by the CA whose key signed it, not by its issuer name', async (t) => {
  const dir = await tempDir(t);
  const ca = (d: string, cn: string) => selfSignedCert(d, cn, { cn, ca: true });
  const serving = ca(dir, 'kubelet-serving-ca');
  const cluster = ca(dir, 'kubernetes-ca');
  // Same subject as the cluster CA, another key: a name is not a signature.
  const lookalike = ca(await tempDir(t), 'kubernetes-ca');
  const leaf = (signer: typeof serving, name: string) =>
    new X509Certificate(signedCert(dir, name, signer, '/O=system:nodes/CN=system:node:w1').pem);
  const [s, c] = [new X509Certificate(serving.pem), new X509Certificate(cluster.pem)];
  assert.equal(servingIssuer(leaf(serving, 'new'), s, c), 'kubelet-serving CA');
  assert.equal(servingIssuer(leaf(cluster, 'old'), s, c), 'cluster CA');
  assert.equal(servingIssuer(leaf(lookalike, 'forged'), s, c), 'another CA');
});
