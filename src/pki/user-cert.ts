// A client certificate for a person (kctl kubeconfig create --user): signed by the cluster CA,
// CN = user, O = groups, valid until `notAfter`. The key is new and never written to disk here.
import { readFile } from 'node:fs/promises';
import type { PkiPaths } from './paths.ts';
import { generateKeyPem, issueLeafCert, keyIdOf, parseCert, parseKey, type Signer } from './x509.ts';

const REMEDY = 'run this on a controller host whose data dir holds the cluster CA';

export async function issueUserCert(
  paths: PkiPaths,
  user: { name: string; groups: string[] },
  notAfter: Date,
  now = new Date(),
): Promise<{ certPem: string; keyPem: string }> {
  const [caPem, caKeyPem] = await Promise.all([readFile(paths.caCert, 'utf8'), readFile(paths.caKey, 'utf8')]);
  const cert = parseCert(caPem, paths.caCert, REMEDY);
  const signer: Signer = { name: 'ca', cert, certPem: caPem, key: parseKey(caKeyPem, paths.caKey, REMEDY), keyId: keyIdOf(cert) };
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
