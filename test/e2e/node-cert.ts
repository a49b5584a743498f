// A node client certificate (O=system:nodes, CN=system:node:<name>) signed with the cluster CA
// in <pkiDir>: what kubelet TLS bootstrap would give a node, for tests and benchmarks that
// run a standalone konnectivity agent.
import { execa } from 'execa';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export async function nodeCert(pkiDir: string, outDir: string, node: string): Promise<{ cert: string; key: string }> {
  const key = join(outDir, `${node}.key`);
  const csr = join(outDir, `${node}.csr`);
  const cert = join(outDir, `${node}.crt`);
  const ext = join(outDir, `${node}.ext`);
  await writeFile(ext, 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n');
  await execa('openssl', ['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', key]);
  await execa('openssl', ['req', '-new', '-key', key, '-subj', `/O=system:nodes/CN=system:node:${node}`, '-out', csr]);
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
