// Certificates signed with the cluster CA in <pkiDir>, as the cluster would issue them: a node
// client certificate (O=system:nodes, CN=system:node:<name>), what kubelet TLS bootstrap would
// give a node, for tests and benchmarks that run a standalone konnectivity agent; and a kubelet
// serving certificate for the node's name and address, as kctl's approver would allow.
import { execa } from 'execa';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export async function nodeCert(pkiDir: string, outDir: string, node: string): Promise<{ cert: string; key: string }> {
  return signedByClusterCa(
    pkiDir,
    outDir,
    node,
    `/O=system:nodes/CN=system:node:${node}`,
    'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n',
  );
}

export async function kubeletServingCert(pkiDir: string, outDir: string, node: string, ...ips: string[]): Promise<{ cert: string; key: string }> {
  return signedByClusterCa(
    pkiDir,
    outDir,
    `${node}-serving`,
    `/O=system:nodes/CN=system:node:${node}`,
    `subjectAltName=${[`DNS:${node}`, ...ips.map((ip) => `IP:${ip}`)].join(',')}\nextendedKeyUsage=serverAuth\n`,
  );
}

async function signedByClusterCa(
  pkiDir: string,
  outDir: string,
  name: string,
  subject: string,
  extensions: string,
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
    join(pkiDir, 'ca.crt'),
    '-CAkey',
    join(pkiDir, 'ca.key'),
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
