// A hosted cluster's trust anchors, made by the operator once: the CAs and keys every control-plane
// pod of the cluster shares (the set `kctl pki save-shared` writes, for `--shared-pki`), and an
// admin kubeconfig signed by its CA for the management cluster's users. Made in a private
// temporary directory that is removed after.
import { X509Certificate } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Logger } from '../base/log.ts';
import { saveSharedPki } from '../controller/pki/shared-pki.ts';
import { ensurePki, issueUserCert, pkiPaths, renderKubeconfig } from '../pki/index.ts';

async function inTempDir<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'kctl-operator-'));
  try {
    return await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** A new cluster's shared CAs and keys (api-only on kine: seven files; full: all), by their Secret key names. */
export function newSharedPki(log: Logger, o: { full: boolean }): Promise<Record<string, Buffer>> {
  return inTempDir(async (dir) => {
    await ensurePki(
      {
        dir: join(dir, 'pki'),
        apiAddress: '127.0.0.1',
        sans: [],
        apiPort: 6443,
        serviceCIDR: '10.96.0.0/12',
        clusterDomain: 'cluster.local',
        ...(o.full ? {} : { apiOnly: { etcd: false } }),
        encryptedResources: ['secrets'],
        localAddresses: [],
        hostname: 'kctl-operator',
      },
      log,
    );
    await saveSharedPki(join(dir, 'pki'), join(dir, 'shared'));
    const out: Record<string, Buffer> = {};
    for (const f of await readdir(join(dir, 'shared'))) out[f] = await readFile(join(dir, 'shared', f));
    return out;
  });
}

/** The CA's expiry, from the Secret's ca.crt (its first certificate: the one that signs). */
export function caNotAfter(caPem: string): Date {
  return new Date(new X509Certificate(caPem).validTo);
}

/** An admin kubeconfig (system:masters) for `server`, signed by the cluster CA in `shared`, valid until `notAfter`. */
export function adminKubeconfig(
  shared: Record<string, Buffer>,
  server: { url: string; serverName?: string },
  notAfter: Date,
): Promise<string> {
  return inTempDir(async (dir) => {
    const paths = pkiPaths(dir);
    await writeFile(paths.caCert, shared['ca.crt']!);
    await writeFile(paths.caKey, shared['ca.key']!, { mode: 0o600 });
    const { certPem, keyPem } = await issueUserCert(
      paths,
      { name: 'kctl-operator-admin', groups: ['system:masters'] },
      notAfter,
    );
    return renderKubeconfig({
      server: server.url,
      ...(server.serverName ? { serverName: server.serverName } : {}),
      caPem: shared['ca.crt']!.toString(),
      user: 'admin',
      certPem,
      keyPem,
    });
  });
}
