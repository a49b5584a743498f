// Certificate authorities and the service-account key: created once, then never replaced.
// Replacing either would silently invalidate every issued certificate, kubeconfig, join
// token or service-account token, so anything odd is an error for the operator to resolve.
import { createPrivateKey, createPublicKey } from 'node:crypto';
import { relative } from 'node:path';
import { PkiError } from './errors.ts';
import {
  CERT_MODE,
  KEY_MODE,
  enforceMode,
  readIfExists,
  writeFileAtomic,
  type EnsureContext,
  type Outcome,
} from './files.ts';

export type { EnsureContext } from './files.ts';
import { bundleOf, splitCertificates } from '../base/pem.ts';
import {
  generateKeyPem,
  isCa,
  issueCaCert,
  keyIdOf,
  keyMatchesCert,
  parseCert,
  parseKey,
  type PrivateKey,
  type Signer,
} from './x509.ts';
import { messageOf } from '../base/errors.ts';

export const CA_YEARS = 10;
// Warn this long before a CA expires: rotating a CA is a planned operation, not a restart.
const CA_WARN_MS = 365 * 24 * 3600 * 1000;

export interface CaSpec {
  name: string; // CN, e.g. kubernetes-ca
  certPath: string;
  keyPath: string;
}

const RESTORE = 'restore it from a backup (a new CA would invalidate every certificate, kubeconfig and join token)';

export async function ensureCa(spec: CaSpec, ctx: EnsureContext): Promise<{ signer: Signer; outcome: Outcome }> {
  const [certPem, keyPem] = await Promise.all([readIfExists(spec.certPath), readIfExists(spec.keyPath)]);
  const certFile = relative(ctx.dir, spec.certPath);
  const keyFile = relative(ctx.dir, spec.keyPath);

  if (certPem !== null && keyPem === null) {
    throw new PkiError(`${spec.keyPath} is missing but ${certFile} exists; ${RESTORE}`);
  }
  if (keyPem === null) {
    const newKeyPem = await generateKeyPem();
    // Key first: a crash before the cert lands leaves a key we can still self-sign below.
    await writeFileAtomic(spec.keyPath, newKeyPem, KEY_MODE);
    const pem = issueCaCert({
      subject: { commonName: spec.name },
      key: parseKey(newKeyPem, spec.keyPath, RESTORE),
      now: ctx.now,
      years: CA_YEARS,
    });
    await writeFileAtomic(spec.certPath, pem, CERT_MODE);
    ctx.log.info({ file: certFile, key: keyFile, reason: 'missing' }, 'created certificate authority');
    return { signer: signerFrom(spec, pem, newKeyPem), outcome: 'created' };
  }

  const key = parseKey(keyPem, spec.keyPath, RESTORE);
  if (certPem === null) {
    // The CA is its key: a fresh self-signed cert with the same key and name still verifies
    // every certificate signed before, and workers holding the old ca.crt still trust new ones.
    const pem = issueCaCert({ subject: { commonName: spec.name }, key, now: ctx.now, years: CA_YEARS });
    await writeFileAtomic(spec.certPath, pem, CERT_MODE);
    ctx.log.warn(
      { file: certFile, reason: 'certificate missing, key present' },
      're-created CA certificate from its existing key',
    );
    return { signer: signerFrom(spec, pem, keyPem), outcome: 'renewed' };
  }

  const signer = signerFrom(spec, await signerFirst(spec, certPem, key, ctx), keyPem);
  if (!isCa(signer.cert))
    throw new PkiError(`${spec.certPath} is not a CA certificate (basicConstraints CA:false); ${RESTORE}`);
  if (!keyMatchesCert(key, signer.cert))
    throw new PkiError(`${spec.keyPath} does not belong to ${certFile}; ${RESTORE}`);
  await Promise.all([enforceMode(spec.keyPath, KEY_MODE, ctx.log), enforceMode(spec.certPath, CERT_MODE, ctx.log)]);
  warnIfExpiring(signer, certFile, ctx);
  return { signer, outcome: 'unchanged' };
}

/**
 * A CA file may be a bundle (during a CA rotation, src/pki/ca-rotation.ts): the certificate of
 * the key comes first. A rotation step interrupted between writing the key and the bundle left
 * it second; it is put first again here.
 */
async function signerFirst(spec: CaSpec, certPem: string, key: PrivateKey, ctx: EnsureContext): Promise<string> {
  const certs = splitCertificates(certPem);
  if (certs.length < 2) return certPem;
  const at = certs.findIndex((c) => keyMatchesCert(key, parseCert(c, spec.certPath, RESTORE)));
  if (at <= 0) return certPem;
  const fixed = bundleOf([certs[at]!, ...certs.filter((_, i) => i !== at)]);
  await writeFileAtomic(spec.certPath, fixed, CERT_MODE);
  ctx.log.warn(
    { file: relative(ctx.dir, spec.certPath) },
    'put the certificate of the CA key first in its bundle (an interrupted CA rotation step)',
  );
  return fixed;
}

/** An existing CA as a signer, read from its files (a missing or damaged one is a PkiError). */
export async function loadSigner(spec: CaSpec): Promise<Signer> {
  const [certPem, keyPem] = await Promise.all([readIfExists(spec.certPath), readIfExists(spec.keyPath)]);
  if (certPem === null || keyPem === null)
    throw new PkiError(`${certPem === null ? spec.certPath : spec.keyPath} is missing; ${RESTORE}`);
  return signerFrom(spec, certPem, keyPem);
}

function signerFrom(spec: CaSpec, certPem: string, keyPem: string): Signer {
  const cert = parseCert(certPem, spec.certPath, RESTORE);
  return { name: spec.name, cert, certPem, key: parseKey(keyPem, spec.keyPath, RESTORE), keyId: keyIdOf(cert) };
}

function warnIfExpiring(signer: Signer, file: string, ctx: EnsureContext): void {
  const notAfter = signer.cert.validity.notAfter;
  if (notAfter.getTime() - ctx.now.getTime() < CA_WARN_MS) {
    ctx.log.warn({ file, notAfter: notAfter.toISOString() }, 'certificate authority expires soon; plan a CA rotation');
  }
}

/**
 * The service-account signing key pair. sa.pub is always derivable from sa.key, so only a
 * lost sa.key is an error; a missing or stale sa.pub is rewritten.
 */
export async function ensureServiceAccountKey(keyPath: string, pubPath: string, ctx: EnsureContext): Promise<Outcome> {
  const [keyPem, pubPem] = await Promise.all([readIfExists(keyPath), readIfExists(pubPath)]);
  const keyFile = relative(ctx.dir, keyPath);
  const pubFile = relative(ctx.dir, pubPath);
  if (keyPem === null && pubPem !== null) {
    throw new PkiError(
      `${keyPath} is missing but ${pubFile} exists; restore it from a backup, or remove ${pubFile} to create a new pair (invalidates every service-account token)`,
    );
  }

  let pem = keyPem;
  if (pem === null) {
    pem = await generateKeyPem();
    await writeFileAtomic(keyPath, pem, KEY_MODE);
    ctx.log.info({ file: keyFile, reason: 'missing' }, 'created service-account key');
  } else {
    await enforceMode(keyPath, KEY_MODE, ctx.log);
  }

  const wantPub = publicKeyPem(pem, keyPath);
  if (pubPem === wantPub) {
    await enforceMode(pubPath, CERT_MODE, ctx.log);
    return 'unchanged';
  }
  await writeFileAtomic(pubPath, wantPub, CERT_MODE);
  ctx.log.info(
    { file: pubFile, reason: pubPem === null ? 'missing' : `does not match ${keyFile}` },
    'wrote service-account public key',
  );
  return keyPem === null ? 'created' : 'renewed';
}

function publicKeyPem(keyPem: string, keyPath: string): string {
  try {
    return createPublicKey(createPrivateKey(keyPem)).export({ type: 'spki', format: 'pem' }).toString();
  } catch (err) {
    throw new PkiError(
      `${keyPath} is not a readable private key (${messageOf(err)}); restore it from a backup, or remove it and sa.pub to create a new pair (invalidates every service-account token)`,
    );
  }
}
