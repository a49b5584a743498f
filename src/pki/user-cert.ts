// A client certificate for a person (kctl kubeconfig create --user): signed by the cluster CA,
// CN = user, O = groups, valid until `notAfter`. The key is new and never written to disk here.
import { loadSigner } from './ca.ts';
import type { PkiPaths } from './paths.ts';
import { generateKeyPem, issueLeafCert, parseKey } from './x509.ts';

export async function issueUserCert(
  paths: PkiPaths,
  user: { name: string; groups: string[] },
  notAfter: Date,
  now = new Date(),
): Promise<{ certPem: string; keyPem: string }> {
  const signer = await loadSigner({ name: 'kubernetes-ca', certPath: paths.caCert, keyPath: paths.caKey });
  const keyPem = await generateKeyPem();
  const key = parseKey(keyPem, 'generated key', 'report a bug');
  const certPem = issueLeafCert({
    subject: { commonName: user.name, organizations: user.groups },
    usages: ['clientAuth'],
    sans: [],
    key,
    signer,
    now,
    years: 1,
    notAfter,
  });
  return { certPem, keyPem };
}
