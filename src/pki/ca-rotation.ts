// The cluster CA's rotation, as files: `ca.crt` is a trust bundle whose first certificate is the
// one that signs (ca.key belongs to it), followed by any other CA still trusted. A rotation moves
// through three phases, each a pair of files every controller and node converges to:
//   trust: the old CA signs, both are trusted   (ca.crt = old, new; ca.key = old)
//   sign:  the new CA signs, both are trusted   (ca.crt = new, old; ca.key = new)
//   drop:  the new CA signs, only it is trusted (ca.crt = new;      ca.key = new)
// Everything that reads ca.crt as its trust (kube-apiserver's client CA, kubeconfigs, the
// konnectivity port, join tokens, nodes) trusts the whole bundle; everything that signs with it
// (kube-controller-manager, kctl's leaf issuance) uses its first certificate.
// A new CA is trusted only with proof: a cross-signature by the key of a CA trusted now (vouchFor,
// made by `kctl pki rotate-ca`), checked by every controller before it writes a phase and by
// every node before it takes a new bundle from cluster-info (unvouched). Whoever can write the
// rotation Secret or cluster-info but holds no CA key cannot add a CA.
import { createHash, createPrivateKey, createPublicKey, sign, verify, X509Certificate } from 'node:crypto';
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
  /** The old CA's key vouching for the new CA (vouchFor); absent in a rotation an older kctl began. */
  proof?: string;
}

/** What a cross-signature signs: its purpose, then the new CA certificate (DER). */
const PROOF_PURPOSE = Buffer.from('kctl.dev/ca-rotation-proof/v1\n');

/** The key of a CA trusted now vouches for a new CA certificate (base64; public, like a certificate). */
export function vouchFor(newCertPem: string, currentKeyPem: string): string {
  const data = Buffer.concat([PROOF_PURPOSE, new X509Certificate(newCertPem).raw]);
  return sign('sha256', data, createPrivateKey(currentKeyPem)).toString('base64');
}

/**
 * The certificates of `bundle` that whoever trusts `trusted` must not start trusting: those it
 * does not trust yet and that no proof, signed with the key of a CA it trusts, vouches for (their
 * subjects, for the reason). Dropping a CA needs no proof.
 */
export function unvouched(bundle: string, trusted: string, proofs: readonly string[]): string[] {
  const have = splitCertificates(trusted).map((c) => new X509Certificate(c));
  const haveDer = new Set(have.map((c) => c.raw.toString('base64')));
  const signedBy = (data: Buffer, proof: string) => (ca: X509Certificate) => {
    try {
      return verify('sha256', data, ca.publicKey, Buffer.from(proof, 'base64'));
    } catch {
      return false; // a proof of the wrong kind for this key
    }
  };
  const out: string[] = [];
  for (const pem of splitCertificates(bundle)) {
    const cert = new X509Certificate(pem);
    if (haveDer.has(cert.raw.toString('base64'))) continue;
    const data = Buffer.concat([PROOF_PURPOSE, cert.raw]);
    if (!proofs.some((p) => have.some(signedBy(data, p)))) out.push(cert.subject.replace(/\n/g, ','));
  }
  return out;
}

/** Whether a private key (PEM) is the one of a certificate (PEM, its first). */
function keyOf(keyPem: string, certPem: string): boolean {
  const spki = (k: ReturnType<typeof createPublicKey>) => k.export({ type: 'spki', format: 'der' });
  return spki(createPublicKey(keyPem)).equals(spki(new X509Certificate(certPem).publicKey));
}

/**
 * Why this host may not write a rotation's phase over the CA it trusts now (`trusted`, its
 * ca.crt), or undefined: the new CA needs a cross-signature by a CA trusted now, and each key
 * must belong to its certificate (else the phase would sign with a key nobody trusts).
 */
export function rotationProblem(r: CaRotation, trusted: string): string | undefined {
  const files = caFilesFor(r);
  const missing = unvouched(files.cert, trusted, r.proof ? [r.proof] : []);
  if (missing.length > 0)
    return `no CA trusted now vouches for ${missing.join('; ')} (the rotation's cross-signature is missing or wrong)`;
  try {
    if (!keyOf(r.oldKey, r.oldCert) || !keyOf(r.newKey, r.newCert))
      return 'a CA key does not belong to its certificate';
  } catch {
    return 'a CA key or certificate cannot be read';
  }
  return undefined;
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
 * leaves a key that belongs to a certificate of the bundle, which ensureCa puts first again),
 * and keeps the rotation's cross-signature beside them for cluster-info. Returns whether anything
 * changed; refuses (PkiError) a rotation that rotationProblem finds fault with.
 */
export async function writeCaPhase(paths: PkiPaths, r: CaRotation): Promise<boolean> {
  const want = caFilesFor(r);
  return withPkiLock(paths.dir, async () => {
    if (await caPhaseOnDisk(paths, r)) return false;
    const [cert, key] = await Promise.all([readIfExists(paths.caCert), readIfExists(paths.caKey)]);
    if (cert === null || key === null)
      throw new PkiError(`${paths.caCert} or its key is missing; restore the PKI from a backup before rotating the CA`);
    const problem = rotationProblem(r, cert);
    if (problem) throw new PkiError(`CA rotation refused: ${problem}; ca.crt is unchanged`);
    if (r.proof && (await readIfExists(paths.caProof)) !== r.proof)
      await writeFileAtomic(paths.caProof, r.proof, CERT_MODE);
    if (key !== want.key) await writeFileAtomic(paths.caKey, want.key, KEY_MODE);
    if (cert !== want.cert) await writeFileAtomic(paths.caCert, want.cert, CERT_MODE);
    return true;
  });
}
