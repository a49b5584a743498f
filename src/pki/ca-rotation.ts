// The cluster CA's rotation, as files: `ca.crt` is a trust bundle whose first certificate is the
// one that signs (ca.key belongs to it), followed by any other CA still trusted. A rotation moves
// through three phases, each a pair of files every controller and node converges to:
//   trust: the old CA signs, both are trusted   (ca.crt = old, new; ca.key = old)
//   sign:  the new CA signs, both are trusted   (ca.crt = new, old; ca.key = new)
//   drop:  the new CA signs, only it is trusted (ca.crt = new;      ca.key = new)
// Everything that reads ca.crt as its trust (kube-apiserver's client CA, kubeconfigs, the
// konnectivity port, join tokens, nodes) trusts the whole bundle; everything that signs with it
// (kube-controller-manager, kctl's leaf issuance) uses its first certificate.
import { createHash, X509Certificate } from 'node:crypto';
import { bundleOf, splitCertificates } from '../base/pem.ts';
import { PkiError } from './errors.ts';
import { CERT_MODE, KEY_MODE, readIfExists, writeFileAtomic } from './files.ts';
import { withPkiLock } from './lock.ts';
import type { PkiPaths } from './paths.ts';
import { generateKeyPem, issueCaCert, parseKey } from './x509.ts';
import { CA_YEARS } from './ca.ts';

export const CA_ROTATION_PHASES = ['trust', 'sign', 'drop'] as const;
export type CaRotationPhase = (typeof CA_ROTATION_PHASES)[number];

/** What a rotation needs to derive every phase's files: the two CAs (PEM) and the new key. */
export interface CaRotation {
  phase: CaRotationPhase;
  oldCert: string;
  newCert: string;
  newKey: string;
  /** The old CA's key: the trust phase still signs with it. */
  oldKey: string;
}

/** A short, stable name for a bundle's content: what controllers and nodes publish as loaded. */
export function bundleHash(pem: string): string {
  return createHash('sha256')
    .update(bundleOf(splitCertificates(pem)))
    .digest('hex')
    .slice(0, 16);
}

/** The ca.crt and ca.key of a phase. */
export function caFilesFor(r: CaRotation): { cert: string; key: string } {
  switch (r.phase) {
    case 'trust':
      return { cert: bundleOf([r.oldCert, r.newCert]), key: r.oldKey };
    case 'sign':
      return { cert: bundleOf([r.newCert, r.oldCert]), key: r.newKey };
    case 'drop':
      return { cert: bundleOf([r.newCert]), key: r.newKey };
  }
}

/** A new cluster CA with a name of its own (two CAs with one subject are hard to tell apart in logs and tools). */
export async function newClusterCa(now: Date): Promise<{ cert: string; key: string }> {
  const key = await generateKeyPem();
  const stamp = now.toISOString().replace(/[-:]/g, '').slice(0, 13);
  const cert = issueCaCert({
    subject: { commonName: `kubernetes-ca-${stamp}` },
    key: parseKey(key, 'new CA key', 'report a bug'),
    now,
    years: CA_YEARS,
  });
  return { cert, key };
}

/** Whether `certPem`'s (first) certificate was signed by the bundle's first certificate. */
export function signedByFirst(certPem: string, bundle: string): boolean {
  const first = splitCertificates(bundle)[0];
  const leaf = splitCertificates(certPem)[0];
  if (!first || !leaf) return false;
  const ca = new X509Certificate(first);
  const cert = new X509Certificate(leaf);
  return cert.checkIssued(ca) && cert.verify(ca.publicKey);
}

/** Whether ca.crt and ca.key hold the phase's files already. */
export async function caPhaseOnDisk(paths: PkiPaths, r: CaRotation): Promise<boolean> {
  const want = caFilesFor(r);
  const [cert, key] = await Promise.all([readIfExists(paths.caCert), readIfExists(paths.caKey)]);
  return cert === want.cert && key === want.key;
}

/**
 * Writes the phase's ca.crt and ca.key under the PKI lock (key first: a crash between the two
 * leaves a key that belongs to a certificate of the bundle, which ensureCa puts first again).
 * Returns whether anything changed.
 */
export async function writeCaPhase(paths: PkiPaths, r: CaRotation): Promise<boolean> {
  const want = caFilesFor(r);
  return withPkiLock(paths.dir, async () => {
    if (await caPhaseOnDisk(paths, r)) return false;
    const [cert, key] = await Promise.all([readIfExists(paths.caCert), readIfExists(paths.caKey)]);
    if (cert === null || key === null)
      throw new PkiError(`${paths.caCert} or its key is missing; restore the PKI from a backup before rotating the CA`);
    if (key !== want.key) await writeFileAtomic(paths.caKey, want.key, KEY_MODE);
    if (cert !== want.cert) await writeFileAtomic(paths.caCert, want.cert, CERT_MODE);
    return true;
  });
}
