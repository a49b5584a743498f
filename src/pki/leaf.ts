// Leaf certificates: issued when missing and renewed when they no longer fit (wrong CA, near
// expiry, different names). A leaf that still fits is left byte-identical, so restarts do not
// churn certificates that running components or operators have pinned.
import { relative } from 'node:path';
import { sameSans, type San } from './addresses.ts';
import {
  CERT_MODE,
  KEY_MODE,
  enforceMode,
  readIfExists,
  writeFileAtomic,
  type EnsureContext,
  type Outcome,
} from './files.ts';

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

const DAY_MS = 24 * 3600 * 1000;
/** How long a leaf certificate lives unless spec.pki.leafValidity says otherwise. */
export const DEFAULT_LEAF_VALIDITY_MS = 365 * DAY_MS;
/** The shortest spec.pki.leafValidity: long enough for a renewal and its pick-up, short enough for tests to see real rotations. */
export const MIN_LEAF_VALIDITY_MS = 10 * 60_000;
const MONTH_MS = 30 * DAY_MS;

/**
 * When a certificate valid from `notBefore` to `notAfter` is due for renewal: two thirds into its
 * lifetime, or 30 days before it expires when that is earlier, but never before half its lifetime.
 * A year-long leaf renews after about 8 months; a 60-day one 30 days before expiry; a 10-minute
 * one after two thirds (the 30 days would fall before it was issued, so they do not count).
 * The one rule for the check at start (renewalReason) and for the renewer while running.
 */
export function renewalTime(notBefore: Date, notAfter: Date): Date {
  const start = notBefore.getTime();
  const life = notAfter.getTime() - start;
  const twoThirds = start + (life * 2) / 3;
  const monthBefore = notAfter.getTime() - MONTH_MS;
  return new Date(monthBefore >= start + life / 2 ? Math.min(twoThirds, monthBefore) : twoThirds);
}

export interface LeafSpec extends LeafRequest {
  signer: Signer;
  /** The lifetime of a new certificate (spec.pki.leafValidity); default a year. */
  validityMs?: number;
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
  const due = renewalTime(notBefore, notAfter);
  if (now.getTime() >= due.getTime())
    return `due for renewal since ${due.toISOString()} (expires ${notAfter.toISOString()})`;
  if (notBefore.getTime() > now.getTime()) return `not valid before ${notBefore.toISOString()} (clock moved back?)`;
  // A shorter spec.pki.leafValidity applies at once; a longer one at the next renewal.
  const validity = spec.validityMs ?? DEFAULT_LEAF_VALIDITY_MS;
  if (notAfter.getTime() - notBefore.getTime() > validity + Math.min(BACKDATE_SLACK_MS, validity))
    return 'lifetime longer than spec.pki.leafValidity';
  if (!sameSubject(subjectOf(cert), spec.subject))
    return `subject changed from ${formatSubject(subjectOf(cert))} to ${formatSubject(spec.subject)}`;
  if (usagesOf(cert).sort().join() !== [...spec.usages].sort().join()) return 'extended key usages changed';
  const have = sansOf(cert);
  if (!sameSans(have, spec.sans)) return `SANs changed (${describeSanChange(have, spec.sans)})`;
  return null;
}

/**
 * notBefore is set a little in the past (clock skew between hosts) and a year may have a leap
 * day: a lifetime may exceed the validity by that much before it counts as longer.
 */
const BACKDATE_SLACK_MS = 2 * DAY_MS;

function formatSubject(s: Subject): string {
  return [`CN=${s.commonName}`, ...(s.organizations ?? []).map((o) => `O=${o}`)].join(',');
}

function describeSanChange(have: readonly San[], want: readonly San[]): string {
  const added = want.filter((s) => !have.includes(s));
  const removed = have.filter((s) => !want.includes(s));
  return [added.length ? `added ${added.join(' ')}` : '', removed.length ? `removed ${removed.join(' ')}` : '']
    .filter(Boolean)
    .join('; ');
}

/** Parses what is on disk; anything unreadable is an error naming the file, never silently replaced. */
export function parseExisting(
  certPem: string | null,
  keyPem: string | null,
  where: { cert: string; key: string },
): Existing {
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
export async function issueLeaf(
  spec: LeafSpec,
  existing: Existing,
  now: Date,
): Promise<{ certPem: string; keyPem: string }> {
  const keyPem = existing.keyPem ?? (await generateKeyPem());
  const key = existing.key ?? parseKey(keyPem, 'generated key', 'report a bug');
  const notAfter = new Date(now.getTime() + (spec.validityMs ?? DEFAULT_LEAF_VALIDITY_MS));
  return { certPem: issueLeafCert({ ...spec, key, now, years: 0, notAfter }), keyPem };
}

/** A certificate + key file pair, e.g. server.crt / server.key. */
export async function ensureLeafFiles(
  spec: LeafSpec,
  certPath: string,
  keyPath: string,
  ctx: EnsureContext,
): Promise<Outcome> {
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
  ctx.log.info(
    { file: relative(ctx.dir, certPath), reason },
    outcome === 'created' ? 'issued certificate' : 'renewed certificate',
  );
  return outcome;
}
