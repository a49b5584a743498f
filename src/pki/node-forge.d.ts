// node-forge exports pki.getTBSCertificate (lib/x509.js, documented there: "Gets the ASN.1
// TBSCertificate part of an X.509v3 certificate"), but @types/node-forge leaves it out.
// kctl signs that part natively (see x509.ts), so it needs the declaration.
import 'node-forge';

declare module 'node-forge' {
  namespace pki {
    function getTBSCertificate(cert: Certificate): asn1.Asn1;
  }
}
