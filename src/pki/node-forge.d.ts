// node-forge's asn1.fromDer takes an options object (lib/asn1.js: strict, parseAllBytes,
// decodeBitStrings), but @types/node-forge only declares the older boolean form. kctl reads
// certificates whose BIT STRINGs must stay raw bytes (see der.ts), so it needs the declaration.
import 'node-forge';

declare module 'node-forge' {
  namespace asn1 {
    function fromDer(
      bytes: string,
      options: { strict?: boolean; parseAllBytes?: boolean; decodeBitStrings?: boolean },
    ): Asn1;
  }
}
