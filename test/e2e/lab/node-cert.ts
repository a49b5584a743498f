// Certificates signed by a controller's CAs in <pkiDir>, as the cluster would issue them: a node
// client certificate (O=system:nodes, CN=system:node:<name>, cluster CA), what kubelet TLS
// bootstrap would give a node, for tests and benchmarks that run a standalone konnectivity agent;
// and a kubelet serving certificate for the node's name and addresses, as kctl's approver would
// allow (kubelet-serving CA; `ca: 'cluster'` makes the one an older kctl issued).
import { execa } from 'execa';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export async function nodeCert(pkiDir: string, outDir: string, node: string): Promise<{ cert: string; key: string }> {
  return signedBy(
    pkiDir,
    outDir,
    node,
    `/O=system:nodes/CN=system:node:${node}`,
    'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n',
  );
}

export async function kubeletServingCert(
  pkiDir: string,
  outDir: string,
  node: string,
  ips: string[],
  ca: 'kubelet-serving' | 'cluster' = 'kubelet-serving',
): Promise<{ cert: string; key: string }> {
  return signedBy(
    pkiDir,
    outDir,
    `${node}-serving-${ca}`,
    `/O=system:nodes/CN=system:node:${node}`,
    `subjectAltName=${[`DNS:${node}`, ...ips.map((ip) => `IP:${ip}`)].join(',')}\nextendedKeyUsage=serverAuth\n`,
    ca === 'cluster' ? 'ca' : 'kubelet-serving-ca',
  );
}

async function signedBy(
  pkiDir: string,
  outDir: string,
  name: string,
  subject: string,
  extensions: string,
  caName = 'ca',
): Promise<{ cert: string; key: string }> {
  const key = join(outDir, `${name}.key`);
  const csr = join(outDir, `${name}.csr`);
  const cert = join(outDir, `${name}.crt`);
  const ext = join(outDir, `${name}.ext`);
  await writeFile(ext, extensions);
  await execa('openssl', ['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', key]);
  await execa('openssl', ['req', '-new', '-key', key, '-subj', subject, '-out', csr]);
  await execa('openssl', [
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    join(pkiDir, `${caName}.crt`),
    '-CAkey',
    join(pkiDir, `${caName}.key`),
    '-CAcreateserial',
    '-days',
    '1',
    '-extfile',
    ext,
    '-out',
    cert,
  ]);
  return { cert, key };
}
