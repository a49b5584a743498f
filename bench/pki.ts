// One throwaway PKI for a bench run: the cluster CA, the konnectivity server certificate and a
// node client certificate, written as files both kctl and the upstream binaries read.
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger } from '../src/base/log.ts';
import { ensurePki, pkiPaths } from '../src/pki/index.ts';
import { generateKeyPem, issueLeafCert, keyIdOf, parseCert, parseKey } from '../src/pki/x509.ts';

export interface BenchPki {
  ca: string;
  serverCert: string;
  serverKey: string;
  nodeCert: string;
  nodeKey: string;
}

export const NODE = 'bench-node';

/** `address`: where the konnectivity server listens (its certificate names it); loopback unless in the lab. */
export async function makePki(dir: string, address = '127.0.0.1'): Promise<BenchPki> {
  const log = createLogger({
    destination: new Writable({
      write(_c, _e, cb) {
        cb();
      },
    }),
    pretty: false,
  });
  await ensurePki(
    {
      dir,
      apiAddress: address,
      sans: [],
      apiPort: 6443,
      serviceCIDR: '10.96.0.0/12',
      clusterDomain: 'cluster.local',
      hostname: 'bench-ctrl',
      localAddresses: [...new Set(['127.0.0.1', address])],
    },
    log,
  );
  const p = pkiPaths(dir);
  const [ca, caKey] = await Promise.all([readFile(p.caCert, 'utf8'), readFile(p.caKey, 'utf8')]);
  const caParsed = parseCert(ca, 'ca.crt', '');
  const signer = { name: 'kubernetes-ca', cert: caParsed, certPem: ca, key: parseKey(caKey, 'ca.key', ''), keyId: keyIdOf(caParsed) };
  const nodeKey = await generateKeyPem();
  const nodeCert = issueLeafCert({
    subject: { commonName: `system:node:${NODE}`, organizations: ['system:nodes'] },
    usages: ['clientAuth'],
    sans: [],
    key: parseKey(nodeKey, 'node.key', ''),
    signer,
    now: new Date(),
    years: 1,
  });
  const out: BenchPki = {
    ca: p.caCert,
    serverCert: p.konnectivityCert,
    serverKey: p.konnectivityKey,
    nodeCert: join(dir, 'node.crt'),
    nodeKey: join(dir, 'node.key'),
  };
  await writeFile(out.nodeCert, nodeCert);
  await writeFile(out.nodeKey, nodeKey, { mode: 0o600 });
  return out;
}
