// PEM bundles: several certificates in one file, the first one first (used by the PKI, and by the
// konnectivity server, which reads the trust bundle it checks agents against).

/** The certificates of a PEM bundle, each as its own PEM block (normalized line ends). */
export function splitCertificates(pem: string): string[] {
  return [...pem.matchAll(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g)].map(
    (m) => `${m[0].replace(/\r\n/g, '\n').trim()}\n`,
  );
}

/** A bundle of certificates, in the order given. */
export function bundleOf(certs: string[]): string {
  return certs.map((c) => `${c.trim()}\n`).join('');
}
