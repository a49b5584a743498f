// Statements only a holder of a cluster CA key can make: a signature with the CA's private key over
// a purpose and the data, checked against the CA certificates a host trusts now (its ca.crt, which
// holds both CAs while a rotation is under way). The encryption key set in the API is one: whoever
// can write Secrets in kube-system cannot forge one.
import { createPrivateKey, sign, verify, X509Certificate } from 'node:crypto';
import { splitCertificates } from '../base/pem.ts';

const signedData = (purpose: string, data: string | Buffer): Buffer =>
  Buffer.concat([Buffer.from(`${purpose}\n`), Buffer.from(data)]);

/** `data` signed for `purpose` with a CA's private key (PEM), base64. */
export function caSign(purpose: string, data: string | Buffer, caKeyPem: string): string {
  return sign('sha256', signedData(purpose, data), createPrivateKey(caKeyPem)).toString('base64');
}

/**
 * Which CA of `bundle` (PEM, in order) signed `data` for `purpose`: its index, or -1 when none did
 * (a missing, malformed or foreign signature).
 */
export function caSigner(
  purpose: string,
  data: string | Buffer,
  signature: string | undefined,
  bundle: string,
): number {
  if (!signature) return -1;
  const sig = Buffer.from(signature, 'base64');
  const msg = signedData(purpose, data);
  return splitCertificates(bundle).findIndex((pem) => {
    try {
      return verify('sha256', msg, new X509Certificate(pem).publicKey, sig);
    } catch {
      return false;
    }
  });
}
