// Thin layer over node-forge: parse, inspect and build certificates. Keys, key generation and
// signatures are node:crypto (native, key generation off the main thread); forge only encodes
// certificates, which node:crypto cannot build. forge's own pure-JS RSA costs ~80 ms per
// signature on our hosts, which alone would blow the start-up budget.
import { createPrivateKey, createPublicKey, generateKeyPair, randomBytes, sign, type KeyObject } from 'node:crypto';
import { promisify } from 'node:util';
import forge from 'node-forge';
import { canonicalIp } from '../base/addresses.ts';
import type { San } from './addresses.ts';
import { PkiError } from './errors.ts';

const { pki, asn1 } = forge;
const generateKeyPairAsync = promisify(generateKeyPair);

export type Certificate = forge.pki.Certificate;
export type PrivateKey = KeyObject;
export type Usage = 'serverAuth' | 'clientAuth';

export interface Subject {
  commonName: string;
  organizations?: string[];
}

/** A CA able to sign: its certificate, key and the key id leafs point back to. */
export interface Signer {
  name: string;
  cert: Certificate;
  certPem: string;
  key: PrivateKey;
  keyId: string; // raw bytes of the subjectKeyIdentifier
}

/** A new RSA-2048 private key as PKCS#1 PEM ("RSA PRIVATE KEY", what kubeadm writes). */
export async function generateKeyPem(): Promise<string> {
  const { privateKey } = await generateKeyPairAsync('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'pem' },
    privateKeyEncoding: { type: 'pkcs1', format: 'pem' },
  });
  return privateKey;
}

export function parseKey(pem: string, file: string, remedy: string): PrivateKey {
  let key: KeyObject;
  try {
    key = createPrivateKey(pem);
  } catch (err) {
    throw new PkiError(`${file} is not a readable private key (${oneLine(err)}); ${remedy}`);
  }
  if (key.asymmetricKeyType !== 'rsa') throw new PkiError(`${file} is a ${key.asymmetricKeyType} key, kctl only handles RSA; ${remedy}`);
  return key;
}

export function parseCert(pem: string, file: string, remedy: string): Certificate {
  try {
    return pki.certificateFromPem(pem);
  } catch (err) {
    throw new PkiError(`${file} is not a readable RSA certificate (${oneLine(err)}); ${remedy}`);
  }
}

function oneLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split('\n')[0] ?? '';
}

function spkiDer(key: PrivateKey): Buffer {
  return createPublicKey(key).export({ type: 'spki', format: 'der' });
}

export function keyMatchesCert(key: PrivateKey, cert: Certificate): boolean {
  const certSpki = Buffer.from(asn1.toDer(pki.publicKeyToAsn1(cert.publicKey)).getBytes(), 'binary');
  return certSpki.equals(spkiDer(key));
}

function forgePublicKey(key: PrivateKey): forge.pki.rsa.PublicKey {
  return pki.publicKeyFromPem(createPublicKey(key).export({ type: 'spki', format: 'pem' }).toString());
}

/** What forge's cert.sign() does, with the RSA operation done natively. */
function signCert(cert: Certificate, key: PrivateKey): string {
  cert.signatureOid = cert.siginfo.algorithmOid = pki.oids.sha256WithRSAEncryption as string;
  cert.tbsCertificate = pki.getTBSCertificate(cert);
  const tbs = Buffer.from(asn1.toDer(cert.tbsCertificate).getBytes(), 'binary');
  cert.signature = sign('sha256', tbs, key).toString('binary');
  return pki.certificateToPem(cert);
}

/** True when `signer` issued `cert`: issuer name matches and the signature verifies. */
export function isSignedBy(cert: Certificate, signer: Signer): boolean {
  try {
    return signer.cert.verify(cert);
  } catch {
    return false; // forge throws on issuer mismatch or an unknown signature algorithm
  }
}

export function isCa(cert: Certificate): boolean {
  const bc = cert.getExtension('basicConstraints') as { cA?: boolean } | undefined;
  return bc?.cA === true;
}

export function subjectOf(cert: Certificate): Subject {
  const attrs = cert.subject.attributes;
  const commonName = String(attrs.find((a) => a.shortName === 'CN')?.value ?? '');
  const organizations = attrs.filter((a) => a.shortName === 'O').map((a) => String(a.value));
  return { commonName, organizations };
}

export function sameSubject(a: Subject, b: Subject): boolean {
  const oa = [...(a.organizations ?? [])].sort();
  const ob = [...(b.organizations ?? [])].sort();
  return a.commonName === b.commonName && oa.length === ob.length && oa.every((o, i) => o === ob[i]);
}

export function sansOf(cert: Certificate): San[] {
  const ext = cert.getExtension('subjectAltName') as { altNames?: { type: number; value: string; ip?: string }[] } | undefined;
  return (ext?.altNames ?? []).flatMap((n): San[] => {
    if (n.type === 2) return [`DNS:${n.value.toLowerCase()}`];
    if (n.type === 7 && n.ip) return [`IP:${canonicalIp(n.ip) ?? n.ip}`];
    return []; // other name types (email, URI) are never in certs we issue
  });
}

export function usagesOf(cert: Certificate): Usage[] {
  const ext = cert.getExtension('extKeyUsage') as Partial<Record<Usage, boolean>> | undefined;
  return (['serverAuth', 'clientAuth'] as const).filter((u) => ext?.[u] === true);
}

/** The CA's subjectKeyIdentifier, or one derived from its key when a foreign CA lacks it. */
export function keyIdOf(cert: Certificate): string {
  const ext = cert.getExtension('subjectKeyIdentifier') as { subjectKeyIdentifier?: string } | undefined;
  if (ext?.subjectKeyIdentifier) return forge.util.hexToBytes(ext.subjectKeyIdentifier);
  return cert.generateSubjectKeyIdentifier().getBytes();
}

/**
 * A random positive serial of 128 bits, minimally DER-encoded: strict parsers (Go's x509,
 * used by every Kubernetes component) reject negative or zero-padded serials.
 */
export function randomSerial(): string {
  let hex = BigInt(`0x${randomBytes(16).toString('hex')}`).toString(16);
  if (hex === '0') hex = '1';
  if (hex.length % 2 === 1) hex = `0${hex}`;
  return parseInt(hex[0] as string, 16) >= 8 ? `00${hex}` : hex;
}

// Backdated a little so a node whose clock runs slightly behind still accepts fresh certs.
const CLOCK_SKEW_MS = 5 * 60 * 1000;

function validity(now: Date, years: number): { notBefore: Date; notAfter: Date } {
  const notBefore = new Date(now.getTime() - CLOCK_SKEW_MS);
  const notAfter = new Date(now.getTime());
  notAfter.setUTCFullYear(notAfter.getUTCFullYear() + years);
  return { notBefore, notAfter };
}

function subjectAttrs(s: Subject): forge.pki.CertificateField[] {
  return [...(s.organizations ?? []).map((value) => ({ shortName: 'O', value })), { shortName: 'CN', value: s.commonName }];
}

function altNames(sans: readonly San[]): { type: number; value?: string; ip?: string }[] {
  return sans.map((s) => (s.startsWith('IP:') ? { type: 7, ip: s.slice(3) } : { type: 2, value: s.slice(4) }));
}

/** A self-signed CA certificate for `key`. */
export function issueCaCert(o: { subject: Subject; key: PrivateKey; now: Date; years: number }): string {
  const cert = pki.createCertificate();
  cert.publicKey = forgePublicKey(o.key);
  cert.serialNumber = randomSerial();
  cert.validity = validity(o.now, o.years);
  cert.setSubject(subjectAttrs(o.subject));
  cert.setIssuer(subjectAttrs(o.subject));
  const keyId = cert.generateSubjectKeyIdentifier().getBytes();
  cert.setExtensions([
    { name: 'basicConstraints', cA: true, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, digitalSignature: true, critical: true },
    { name: 'subjectKeyIdentifier' }, // forge derives it from the public key
    { name: 'authorityKeyIdentifier', keyIdentifier: keyId },
  ]);
  return signCert(cert, o.key);
}

export interface LeafRequest {
  subject: Subject;
  usages: readonly Usage[];
  sans: readonly San[];
}

/** A leaf certificate for `key`, signed by `signer`. */
export function issueLeafCert(o: LeafRequest & { key: PrivateKey; signer: Signer; now: Date; years: number; notAfter?: Date }): string {
  const cert = pki.createCertificate();
  cert.publicKey = forgePublicKey(o.key);
  cert.serialNumber = randomSerial();
  cert.validity = validity(o.now, o.years);
  if (o.notAfter) cert.validity.notAfter = o.notAfter;
  cert.setSubject(subjectAttrs(o.subject));
  cert.setIssuer(o.signer.cert.subject.attributes);
  const extensions: object[] = [
    { name: 'basicConstraints', cA: false, critical: true },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
    { name: 'extKeyUsage', ...Object.fromEntries(o.usages.map((u) => [u, true])) },
    { name: 'subjectKeyIdentifier' },
    { name: 'authorityKeyIdentifier', keyIdentifier: o.signer.keyId },
  ];
  if (o.sans.length > 0) extensions.push({ name: 'subjectAltName', altNames: altNames(o.sans) });
  cert.setExtensions(extensions);
  return signCert(cert, o.signer.key);
}
