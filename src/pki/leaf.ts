// Leaf certificates: issued when missing and renewed when they no longer fit (wrong CA, near
// expiry, different names). A leaf that still fits is left byte-identical, so restarts do not
// churn certificates that running components or operators have pinned.
import { relative } from 'node:path';
import { sameSans, type San } from './addresses.ts';
import { CERT_MODE, KEY_MODE, enforceMode, readIfExists, writeFileAtomic, type EnsureContext, type Outcome } from './files.ts';

export type { Outcome } from './files.ts';
import {
  generateKeyPem,
  isSignedBy,
  issueLeafCert,
  keyMatchesCert,
  parseCert,
  parseKey,
  sameSubject,
  sansOf,
  subjectOf,
  usagesOf,
  type Certificate,
  type LeafRequest,
  type PrivateKey,
  type Signer,
  type Subject,
} from './x509.ts';

export const LEAF_YEARS = 1;
// Renew a month ahead: a controller restarted at least monthly never serves an expired cert.
export const RENEW_BEFORE_MS = 30 * 24 * 3600 * 1000;

export interface LeafSpec extends LeafRequest {
  signer: Signer;
}

/** Parsed existing credential; null parts are missing. */
export interface Existing {
  cert: Certificate | null;
  key: PrivateKey | null;
  keyPem: string | null;
}

/** Why the existing certificate must be (re)issued, or null when it still fits `spec`. */
export function renewalReason(existing: Existing, spec: LeafSpec, now: Date): string | null {
  const { cert, key } = existing;
  if (cert === null) return 'missing';
  if (key === null) return 'key missing';
  if (!keyMatchesCert(key, cert)) return 'key does not match certificate';
  if (!isSignedBy(cert, spec.signer)) return `not signed by the current ${spec.signer.name}`;
  const { notBefore, notAfter } = cert.validity;
  const left = notAfter.getTime() - now.getTime();
  if (left <= 0) return `expired ${notAfter.toISOString()}`;
  if (left < RENEW_BEFORE_MS) return `expires ${notAfter.toISOString()}, within 30 days`;
  if (notBefore.getTime() > now.getTime()) return `not valid before ${notBefore.toISOString()} (clock moved back?)`;
  if (!sameSubject(subjectOf(cert), spec.subject)) return `subject changed from ${formatSubject(subjectOf(cert))} to ${formatSubject(spec.subject)}`;
  if (usagesOf(cert).sort().join() !== [...spec.usages].sort().join()) return 'extended key usages changed';
  const have = sansOf(cert);
  if (!sameSans(have, spec.sans)) return `SANs changed (${describeSanChange(have, spec.sans)})`;
  return null;
}

function formatSubject(s: Subject): string {
  return [`CN=${s.commonName}`, ...(s.organizations ?? []).map((o) => `O=${o}`)].join(',');
}

function describeSanChange(have: readonly San[], want: readonly San[]): string {
  const added = want.filter((s) => !have.includes(s));
  const removed = have.filter((s) => !want.includes(s));
  return [added.length ? `added ${added.join(' ')}` : '', removed.length ? `removed ${removed.join(' ')}` : ''].filter(Boolean).join('; ');
}

/** Parses what is on disk; anything unreadable is an error naming the file, never silently replaced. */
export function parseExisting(certPem: string | null, keyPem: string | null, where: { cert: string; key: string }): Existing {
  const remedy = (file: string) => `remove ${file} and start again to have kctl issue a new one`;
  return {
    cert: certPem === null ? null : parseCert(certPem, where.cert, remedy(where.cert)),
    key: keyPem === null ? null : parseKey(keyPem, where.key, remedy(where.key)),
    keyPem,
  };
}

/**
 * A fresh certificate for `spec`. The existing key is kept when there is one (as `kubeadm certs
 * renew` does), which also saves generating a key on every renewal.
 */
export async function issueLeaf(spec: LeafSpec, existing: Existing, now: Date): Promise<{ certPem: string; keyPem: string }> {
  const keyPem = existing.keyPem ?? (await generateKeyPem());
  const key = existing.key ?? parseKey(keyPem, 'generated key', 'report a bug');
  return { certPem: issueLeafCert({ ...spec, key, now, years: LEAF_YEARS }), keyPem };
}

/** A certificate + key file pair, e.g. server.crt / server.key. */
export async function ensureLeafFiles(spec: LeafSpec, certPath: string, keyPath: string, ctx: EnsureContext): Promise<Outcome> {
  const [certPem, keyPem] = await Promise.all([readIfExists(certPath), readIfExists(keyPath)]);
  const existing = parseExisting(certPem, keyPem, { cert: certPath, key: keyPath });
  const reason = renewalReason(existing, spec, ctx.now);
  if (reason === null) {
    await Promise.all([enforceMode(keyPath, KEY_MODE, ctx.log), enforceMode(certPath, CERT_MODE, ctx.log)]);
    return 'unchanged';
  }
  const issued = await issueLeaf(spec, existing, ctx.now);
  // Key before cert: a crash in between leaves a key that the next run reuses.
  if (issued.keyPem !== keyPem) await writeFileAtomic(keyPath, issued.keyPem, KEY_MODE);
  else await enforceMode(keyPath, KEY_MODE, ctx.log);
  await writeFileAtomic(certPath, issued.certPem, CERT_MODE);
  const outcome: Outcome = certPem === null ? 'created' : 'renewed';
  ctx.log.info({ file: relative(ctx.dir, certPath), reason }, outcome === 'created' ? 'issued certificate' : 'renewed certificate');
  return outcome;
}
