// Certificates: built as DER (der.ts) and signed with node:crypto; read with node:crypto's
// X509Certificate plus a walk of the few fields it does not expose (names, SANs, key ids).
// New keys are ECDSA P-256, as k3s makes them: generating one costs well under a millisecond,
// against 60 to 200 ms of CPU for an RSA-2048 key, which a control plane's first start (7 to
// 16 keys) and ten tenants starting at once pay in full. Existing RSA keys, CAs brought by the
// operator and certificates issued by earlier kctl versions keep working: both kinds are read,
// and a CA signs with whatever key it has.
import {
  X509Certificate,
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPair,
  randomBytes,
  sign,
  type KeyObject,
} from 'node:crypto';
import { promisify } from 'node:util';
import { canonicalIp } from '../base/addresses.ts';
import type { San } from './addresses.ts';
import * as der from './der.ts';
import { PkiError } from './errors.ts';
import { reasonOf } from '../base/errors.ts';

const generateKeyPairAsync = promisify(generateKeyPair);

export type PrivateKey = KeyObject;
export type Usage = 'serverAuth' | 'clientAuth';

export interface Subject {
  commonName: string;
  organizations?: string[];
}

/** A parsed certificate: what kctl checks before it keeps, renews or signs with one. */
export interface Certificate {
  x509: X509Certificate;
  /** The subject Name as encoded, copied byte for byte as the issuer of what a CA signs. */
  subjectName: der.Node;
  issuerDer: Buffer;
  subjectDer: Buffer;
  subject: Subject;
  validity: { notBefore: Date; notAfter: Date };
  sans: San[];
  usages: Usage[];
  /** subjectKeyIdentifier, when the certificate has one. */
  keyId: Buffer | null;
}

/** A CA able to sign: its certificate, key and the key id leafs point back to. */
export interface Signer {
  name: string;
  cert: Certificate;
  certPem: string;
  key: PrivateKey;
  keyId: Buffer;
}

const OID = {
  cn: '2.5.4.3',
  o: '2.5.4.10',
  basicConstraints: '2.5.29.19',
  keyUsage: '2.5.29.15',
  extKeyUsage: '2.5.29.37',
  subjectKeyIdentifier: '2.5.29.14',
  authorityKeyIdentifier: '2.5.29.35',
  subjectAltName: '2.5.29.17',
  serverAuth: '1.3.6.1.5.5.7.3.1',
  clientAuth: '1.3.6.1.5.5.7.3.2',
  ecdsaWithSha256: '1.2.840.10045.4.3.2',
  sha256WithRsa: '1.2.840.113549.1.1.11',
} as const;

/** A new ECDSA P-256 private key as SEC 1 PEM ("EC PRIVATE KEY", what kubeadm writes for ECDSA). */
export async function generateKeyPem(): Promise<string> {
  const { privateKey } = await generateKeyPairAsync('ec', {
    namedCurve: 'prime256v1',
    publicKeyEncoding: { type: 'spki', format: 'pem' },
    privateKeyEncoding: { type: 'sec1', format: 'pem' },
  });
  return privateKey;
}

export function parseKey(pem: string, file: string, remedy: string): PrivateKey {
  let key: KeyObject;
  try {
    key = createPrivateKey(pem);
  } catch (err) {
    throw new PkiError(`${file} is not a readable private key (${reasonOf(err)}); ${remedy}`);
  }
  if (key.asymmetricKeyType !== 'rsa' && key.asymmetricKeyType !== 'ec')
    throw new PkiError(`${file} is a ${key.asymmetricKeyType} key, kctl handles RSA and ECDSA keys; ${remedy}`);
  return key;
}

export function parseCert(pem: string, file: string, remedy: string): Certificate {
  try {
    return readCert(new X509Certificate(pem));
  } catch (err) {
    throw new PkiError(`${file} is not a readable X.509 certificate (${reasonOf(err)}); ${remedy}`);
  }
}

function readCert(x509: X509Certificate): Certificate {
  const [tbs] = der.children(der.fromDer(x509.raw));
  const fields = der.children(tbs);
  // version is [0] EXPLICIT and optional; then serial, signature, issuer, validity, subject.
  const at = der.isContext(fields[0], 0) ? 1 : 0;
  const [issuer, validity, subject] = [fields[at + 2], fields[at + 3], fields[at + 4]];
  if (!issuer || !validity || !subject) throw new Error('truncated TBSCertificate');
  const [notBefore, notAfter] = der.children(validity).map(der.dateOf);
  const exts = extensions(fields.slice(at + 6));
  return {
    x509,
    subjectName: subject,
    issuerDer: der.toDer(issuer),
    subjectDer: der.toDer(subject),
    subject: subjectFrom(subject),
    validity: { notBefore: notBefore ?? new Date(NaN), notAfter: notAfter ?? new Date(NaN) },
    sans: sansFrom(exts.get(OID.subjectAltName)),
    usages: usagesFrom(exts.get(OID.extKeyUsage)),
    keyId: exts.has(OID.subjectKeyIdentifier) ? der.buf(der.bytesOf(exts.get(OID.subjectKeyIdentifier))) : null,
  };
}

/** The extensions ([3] EXPLICIT, after the optional unique ids) by OID, each value parsed. */
function extensions(rest: der.Node[]): Map<string, der.Node> {
  const out = new Map<string, der.Node>();
  const block = rest.find((n) => der.isContext(n, 3));
  for (const ext of der.children(der.children(block)[0])) {
    const parts = der.children(ext);
    const value = parts[parts.length - 1];
    out.set(der.oidOf(parts[0]), der.fromDer(der.buf(der.bytesOf(value))));
  }
  return out;
}

function subjectFrom(name: der.Node): Subject {
  let commonName = '';
  const organizations: string[] = [];
  for (const rdn of der.children(name))
    for (const atv of der.children(rdn)) {
      const [type, value] = der.children(atv);
      const id = der.oidOf(type);
      if (id === OID.cn) commonName = der.textOf(value);
      else if (id === OID.o) organizations.push(der.textOf(value));
    }
  return { commonName, organizations };
}

function sansFrom(ext: der.Node | undefined): San[] {
  return der.children(ext).flatMap((n): San[] => {
    if (der.isContext(n, 2)) return [`DNS:${der.bytesOf(n).toLowerCase()}`];
    if (der.isContext(n, 7)) {
      const ip = ipFromBytes(der.buf(der.bytesOf(n)));
      return ip ? [`IP:${ip}`] : [];
    }
    return []; // other name types (email, URI) are never in certs we issue
  });
}

function ipFromBytes(b: Buffer): string | null {
  if (b.length === 4) return [...b].join('.');
  if (b.length !== 16) return null;
  const groups = Array.from({ length: 8 }, (_, i) => b.readUInt16BE(i * 2).toString(16));
  return canonicalIp(groups.join(':'));
}

function ipToBytes(ip: string): Buffer {
  const v4 = ip.split('.');
  if (v4.length === 4) return Buffer.from(v4.map(Number));
  const [head = '', tail = ''] = ip.split('::');
  const h = head ? head.split(':') : [];
  const t = ip.includes('::') && tail ? tail.split(':') : [];
  const groups = ip.includes('::') ? [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t] : h;
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2));
  return out;
}

function usagesFrom(ext: der.Node | undefined): Usage[] {
  const ids = der.children(ext).map(der.oidOf);
  return (['serverAuth', 'clientAuth'] as const).filter((u) => ids.includes(OID[u]));
}

function spkiDer(key: KeyObject): Buffer {
  return (key.type === 'public' ? key : createPublicKey(key)).export({ type: 'spki', format: 'der' });
}

export function keyMatchesCert(key: PrivateKey, cert: Certificate): boolean {
  return spkiDer(cert.x509.publicKey).equals(spkiDer(key));
}

/** True when `signer` issued `cert`: issuer name matches and the signature verifies. */
export function isSignedBy(cert: Certificate, signer: Signer): boolean {
  try {
    return cert.issuerDer.equals(signer.cert.subjectDer) && cert.x509.verify(signer.cert.x509.publicKey);
  } catch {
    return false;
  }
}

export function isCa(cert: Certificate): boolean {
  return cert.x509.ca;
}

export const subjectOf = (cert: Certificate): Subject => cert.subject;
export const sansOf = (cert: Certificate): San[] => cert.sans;
export const usagesOf = (cert: Certificate): Usage[] => cert.usages;

export function sameSubject(a: Subject, b: Subject): boolean {
  const oa = [...(a.organizations ?? [])].sort();
  const ob = [...(b.organizations ?? [])].sort();
  return a.commonName === b.commonName && oa.length === ob.length && oa.every((o, i) => o === ob[i]);
}

/** RFC 5280 4.2.1.2 method 1: SHA-1 of the subjectPublicKey bits. */
function keyIdFor(key: KeyObject): Buffer {
  const [, bitString] = der.children(der.fromDer(spkiDer(key)));
  return createHash('sha1')
    .update(der.buf(der.bytesOf(bitString).slice(1)))
    .digest();
}

/** The CA's subjectKeyIdentifier, or one derived from its key when a foreign CA lacks it. */
export function keyIdOf(cert: Certificate): Buffer {
  return cert.keyId ?? keyIdFor(cert.x509.publicKey);
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

function validity(now: Date, years: number, notAfter?: Date): der.Node {
  const end = notAfter ?? new Date(now.getTime());
  if (!notAfter) end.setUTCFullYear(end.getUTCFullYear() + years);
  return der.seq([der.time(new Date(now.getTime() - CLOCK_SKEW_MS)), der.time(end)]);
}

/** A Name: O first, then CN, each its own RDN, as UTF8String. */
function nameOf(s: Subject): der.Node {
  const atv = (id: string, value: string) => der.set([der.seq([der.oid(id), der.utf8(value)])]);
  return der.seq([...(s.organizations ?? []).map((o) => atv(OID.o, o)), atv(OID.cn, s.commonName)]);
}

function extension(id: string, value: der.Node, critical = false): der.Node {
  return der.seq([der.oid(id), ...(critical ? [der.boolTrue()] : []), der.octets(der.toDer(value))]);
}

// keyUsage bits (RFC 5280 4.2.1.3).
const DIGITAL_SIGNATURE = 0;
const KEY_ENCIPHERMENT = 2;
const KEY_CERT_SIGN = 5;
const CRL_SIGN = 6;

function signatureAlgorithm(key: PrivateKey): der.Node {
  // RFC 5758: ECDSA algorithm identifiers have no parameters; RSA's carry NULL (RFC 4055).
  return key.asymmetricKeyType === 'ec'
    ? der.seq([der.oid(OID.ecdsaWithSha256)])
    : der.seq([der.oid(OID.sha256WithRsa), der.nullNode()]);
}

interface TbsFields {
  subject: der.Node;
  issuer: der.Node;
  key: PrivateKey;
  signerKey: PrivateKey;
  validity: der.Node;
  extensions: der.Node[];
}

/** Builds, signs and PEM-encodes a certificate. */
function issue(f: TbsFields): string {
  const algorithm = signatureAlgorithm(f.signerKey);
  const tbs = der.seq([
    der.explicit(0, der.integer(2)), // v3
    der.integerHex(randomSerial()),
    algorithm,
    f.issuer,
    f.validity,
    f.subject,
    der.fromDer(spkiDer(f.key)),
    der.explicit(3, der.seq(f.extensions)),
  ]);
  const tbsDer = der.toDer(tbs);
  const signature = sign('sha256', tbsDer, f.signerKey);
  return new X509Certificate(der.toDer(der.seq([tbs, algorithm, der.bits(signature)]))).toString();
}

/** A self-signed CA certificate for `key`. */
export function issueCaCert(o: { subject: Subject; key: PrivateKey; now: Date; years: number }): string {
  const keyId = keyIdFor(o.key);
  const name = nameOf(o.subject);
  return issue({
    subject: name,
    issuer: name,
    key: o.key,
    signerKey: o.key,
    validity: validity(o.now, o.years),
    extensions: [
      extension(OID.basicConstraints, der.seq([der.boolTrue()]), true),
      extension(OID.keyUsage, der.flagBits([DIGITAL_SIGNATURE, KEY_CERT_SIGN, CRL_SIGN]), true),
      extension(OID.subjectKeyIdentifier, der.octets(keyId)),
      extension(OID.authorityKeyIdentifier, der.seq([der.implicit(0, der.bin(keyId))])),
    ],
  });
}

export interface LeafRequest {
  subject: Subject;
  usages: readonly Usage[];
  sans: readonly San[];
}

/** A leaf certificate for `key`, signed by `signer`. */
export function issueLeafCert(
  o: LeafRequest & { key: PrivateKey; signer: Signer; now: Date; years: number; notAfter?: Date },
): string {
  // keyEncipherment only means something for RSA key transport; ECDSA keys only sign.
  const usage = o.key.asymmetricKeyType === 'rsa' ? [DIGITAL_SIGNATURE, KEY_ENCIPHERMENT] : [DIGITAL_SIGNATURE];
  const extensions = [
    extension(OID.basicConstraints, der.seq([]), true),
    extension(OID.keyUsage, der.flagBits(usage), true),
    extension(OID.extKeyUsage, der.seq(o.usages.map((u) => der.oid(OID[u])))),
    extension(OID.subjectKeyIdentifier, der.octets(keyIdFor(o.key))),
    extension(OID.authorityKeyIdentifier, der.seq([der.implicit(0, der.bin(o.signer.keyId))])),
  ];
  if (o.sans.length > 0)
    extensions.push(
      extension(
        OID.subjectAltName,
        der.seq(
          o.sans.map((s) =>
            s.startsWith('IP:') ? der.implicit(7, der.bin(ipToBytes(s.slice(3)))) : der.implicit(2, s.slice(4)),
          ),
        ),
      ),
    );
  return issue({
    subject: nameOf(o.subject),
    issuer: o.signer.cert.subjectName,
    key: o.key,
    signerKey: o.signer.key,
    validity: validity(o.now, o.years, o.notAfter),
    extensions,
  });
}

/** A PKCS#10 certificate request for `key` (kubelet's shape: the subject only, no extensions). */
export function certificateRequestPem(subject: Subject, key: PrivateKey): string {
  const info = der.seq([
    der.integer(0),
    nameOf(subject),
    der.fromDer(spkiDer(key)),
    der.explicitEmpty(0), // attributes: none
  ]);
  const infoDer = der.toDer(info);
  const body = der.toDer(der.seq([info, signatureAlgorithm(key), der.bits(sign('sha256', infoDer, key))]));
  return `-----BEGIN CERTIFICATE REQUEST-----\n${body
    .toString('base64')
    .replace(/(.{64})/g, '$1\n')
    .trimEnd()}\n-----END CERTIFICATE REQUEST-----\n`;
}
