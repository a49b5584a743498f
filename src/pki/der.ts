// The few DER shapes an X.509 certificate is made of, built and read with forge's ASN.1 codec
// (which, unlike forge's certificate layer, does not care which kind of key a certificate holds).
import forge from 'node-forge';

const { asn1 } = forge;
export type Node = forge.asn1.Asn1;

const U = asn1.Class.UNIVERSAL;
const T = asn1.Type;

/** Bytes as forge's binary strings, and back. */
export const bin = (b: Buffer): string => b.toString('binary');
export const buf = (s: string): Buffer => Buffer.from(s, 'binary');

export const seq = (items: Node[]): Node => asn1.create(U, T.SEQUENCE, true, items);
export const set = (items: Node[]): Node => asn1.create(U, T.SET, true, items);
export const oid = (dotted: string): Node => asn1.create(U, T.OID, false, asn1.oidToDer(dotted).getBytes());
export const octets = (b: Buffer): Node => asn1.create(U, T.OCTETSTRING, false, bin(b));
export const utf8 = (s: string): Node => asn1.create(U, T.UTF8, false, forge.util.encodeUtf8(s));
export const boolTrue = (): Node => asn1.create(U, T.BOOLEAN, false, '\xff');
export const nullNode = (): Node => asn1.create(U, T.NULL, false, '');
/** A BIT STRING of whole bytes (signatures, keys). */
export const bits = (b: Buffer): Node => asn1.create(U, T.BITSTRING, false, `\x00${bin(b)}`);
/** A BIT STRING of flags, bit 0 first (keyUsage). */
export function flagBits(set: number[]): Node {
  let v = 0;
  for (const b of set) v |= 0x80 >> b;
  const unused = v === 0 ? 7 : Math.min(7, Math.floor(Math.log2(v & -v)));
  return asn1.create(U, T.BITSTRING, false, String.fromCharCode(unused, v));
}
/** A positive INTEGER from its minimal big-endian hex (a serial). */
export const integerHex = (hex: string): Node => asn1.create(U, T.INTEGER, false, forge.util.hexToBytes(hex));
export const integer = (n: number): Node => asn1.create(U, T.INTEGER, false, asn1.integerToDer(n).getBytes());
/** [n] IMPLICIT primitive (GeneralName choices, keyIdentifier). */
export const implicit = (n: number, bytes: string): Node => asn1.create(asn1.Class.CONTEXT_SPECIFIC, n, false, bytes);
/** [n] EXPLICIT (version, extensions). */
export const explicit = (n: number, inner: Node): Node => asn1.create(asn1.Class.CONTEXT_SPECIFIC, n, true, [inner]);
/** [n] with nothing inside, constructed (a PKCS#10 request's empty attribute set). */
export const explicitEmpty = (n: number): Node => asn1.create(asn1.Class.CONTEXT_SPECIFIC, n, true, []);
/** RFC 5280 4.1.2.5: UTCTime through 2049, GeneralizedTime after. */
export function time(d: Date): Node {
  return d.getUTCFullYear() < 2050
    ? asn1.create(U, T.UTCTIME, false, asn1.dateToUtcTime(d))
    : asn1.create(U, T.GENERALIZEDTIME, false, asn1.dateToGeneralizedTime(d));
}

export const toDer = (n: Node): Buffer => buf(asn1.toDer(n).getBytes());
/** Parses DER; BIT STRINGs stay raw bytes (forge would otherwise try to read keys inside them). */
export const fromDer = (b: Buffer): Node => asn1.fromDer(bin(b), { strict: true, decodeBitStrings: false });

export function children(n: Node | undefined): Node[] {
  return n && Array.isArray(n.value) ? (n.value as Node[]) : [];
}
export const bytesOf = (n: Node | undefined): string => (n && typeof n.value === 'string' ? n.value : '');
export const oidOf = (n: Node | undefined): string => asn1.derToOid(bytesOf(n));
export const isContext = (n: Node | undefined, tag: number): boolean =>
  n?.tagClass === asn1.Class.CONTEXT_SPECIFIC && n.type === tag;

export function dateOf(n: Node | undefined): Date {
  return n?.type === T.GENERALIZEDTIME ? asn1.generalizedTimeToDate(bytesOf(n)) : asn1.utcTimeToDate(bytesOf(n));
}

/** A directory string's text (UTF8String, PrintableString, IA5String...). */
export function textOf(n: Node | undefined): string {
  const raw = bytesOf(n);
  if (n?.type === T.UTF8) return forge.util.decodeUtf8(raw);
  if (n?.type === T.BMPSTRING) return Buffer.from(raw, 'binary').swap16().toString('utf16le');
  return raw;
}

export const TYPE = T;
