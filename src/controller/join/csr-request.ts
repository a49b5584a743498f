// Reads the subject and subjectAltNames out of a PKCS#10 request. kubelet's requests use
// ECDSA keys, which node-forge's CSR reader refuses, so this walks the ASN.1 with forge.asn1.
import forge from 'node-forge';

export interface CsrContents {
  commonName: string;
  organizations: string[];
  dnsNames: string[];
  ipAddresses: string[];
  otherNames: number; // email, URI and other SAN kinds (never allowed for kubelet serving certs)
}

const OID_CN = '2.5.4.3';
const OID_O = '2.5.4.10';
const OID_EXT_REQUEST = '1.2.840.113549.1.9.14';
const OID_SAN = '2.5.29.17';

function ipFromBytes(bytes: string): string {
  const b = Buffer.from(bytes, 'binary');
  if (b.length === 4) return [...b].join('.');
  if (b.length === 16) {
    const groups: string[] = [];
    for (let i = 0; i < 16; i += 2) groups.push(b.readUInt16BE(i).toString(16));
    return groups
      .join(':')
      .replace(/(^|:)0(:0)+(:|$)/, '::')
      .replace(/:::+/, '::');
  }
  return `invalid(${b.length} bytes)`;
}

function children(node: forge.asn1.Asn1): forge.asn1.Asn1[] {
  return Array.isArray(node.value) ? (node.value as forge.asn1.Asn1[]) : [];
}

export function parseCsr(pem: string): CsrContents {
  const msg = forge.pem.decode(pem)[0];
  if (!msg || msg.type !== 'CERTIFICATE REQUEST') throw new Error('not a PEM certificate request');
  const root = forge.asn1.fromDer(msg.body);
  const info = children(root)[0];
  if (!info) throw new Error('certificate request has no body');
  const [, subject, , attributes] = children(info);
  const out: CsrContents = { commonName: '', organizations: [], dnsNames: [], ipAddresses: [], otherNames: 0 };
  for (const rdn of children(subject!)) {
    for (const atv of children(rdn)) {
      const [oid, value] = children(atv);
      const name = forge.asn1.derToOid(oid!.value as string);
      if (name === OID_CN) out.commonName = value!.value as string;
      if (name === OID_O) out.organizations.push(value!.value as string);
    }
  }
  for (const attr of attributes ? children(attributes) : []) {
    const [oid, set] = children(attr);
    if (forge.asn1.derToOid(oid!.value as string) !== OID_EXT_REQUEST) continue;
    for (const exts of children(set!)) {
      for (const ext of children(exts)) {
        const parts = children(ext);
        if (forge.asn1.derToOid(parts[0]!.value as string) !== OID_SAN) continue;
        const octets = parts[parts.length - 1]!;
        const names = forge.asn1.fromDer(octets.value as string);
        for (const gn of children(names)) {
          if (gn.type === 2) out.dnsNames.push(gn.value as string);
          else if (gn.type === 7) out.ipAddresses.push(ipFromBytes(gn.value as string));
          else out.otherNames += 1;
        }
      }
    }
  }
  return out;
}
