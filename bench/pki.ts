// One throwaway PKI for a bench run: the cluster CA, the konnectivity server certificate and a
// node client certificate, written as files both kctl and the upstream binaries read; and, for
// figures with many agents, a node certificate per agent.
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger } from '../src/base/log.ts';
import { ensurePki, pkiPaths } from '../src/pki/index.ts';
import { generateKeyPem, issueLeafCert, keyIdOf, parseCert, parseKey, type Signer } from '../src/pki/x509.ts';

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
  const nodeKey = await generateKeyPem();
  const out: BenchPki = {
    ca: p.caCert,
    serverCert: p.konnectivityCert,
    serverKey: p.konnectivityKey,
    nodeCert: join(dir, 'node.crt'),
    nodeKey: join(dir, 'node.key'),
  };
  await writeFile(out.nodeCert, nodeCertPem(await caSigner(dir), NODE, nodeKey));
  await writeFile(out.nodeKey, nodeKey, { mode: 0o600 });
  return out;
}

export interface NodeCredentials {
  name: string;
  cert: string;
  key: string;
}

/**
 * A node client certificate per name (CN=system:node:<name>), signed by the CA of `makePki(dir)`:
 * one JSON file of {name, cert, key} (PEM), 0600, whose path is returned.
 */
export async function makeNodeCerts(dir: string, names: string[]): Promise<string> {
  const signer = await caSigner(dir);
  const nodes: NodeCredentials[] = [];
  for (const name of names) {
    const key = await generateKeyPem();
    nodes.push({ name, cert: nodeCertPem(signer, name, key), key });
  }
  const file = join(dir, `nodes-${names.length}.json`);
  await writeFile(file, JSON.stringify(nodes), { mode: 0o600 });
  return file;
}

async function caSigner(dir: string): Promise<Signer> {
  const p = pkiPaths(dir);
  const [ca, caKey] = await Promise.all([readFile(p.caCert, 'utf8'), readFile(p.caKey, 'utf8')]);
  const cert = parseCert(ca, 'ca.crt', '');
  return { name: 'kubernetes-ca', cert, certPem: ca, key: parseKey(caKey, 'ca.key', ''), keyId: keyIdOf(cert) };
}

function nodeCertPem(signer: Signer, name: string, key: string): string {
  return issueLeafCert({
    subject: { commonName: `system:node:${name}`, organizations: ['system:nodes'] },
    usages: ['clientAuth'],
    sans: [],
    key: parseKey(key, `${name}.key`, ''),
    signer,
    now: new Date(),
    years: 1,
  });
}
