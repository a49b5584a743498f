// What a datastore holds for a key, read around kube-apiserver: etcd through the staged etcdctl
// with the API server's etcd client certificate, kine's SQLite file through node:sqlite.
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { controllerPaths } from '../../../src/controller/config/paths.ts';
import type { LabHost } from './lab.ts';

/** etcdctl on `host` against its etcd, with kube-apiserver's etcd client certificate. */
function etcdctl(host: LabHost, dataDir: string, clientPort: number, args: string[], encoding: 'buffer' | 'utf8') {
  const pki = join(dataDir, 'pki');
  return host.run(
    join(controllerPaths(dataDir, '/nonexistent').binDir, 'etcdctl'),
    [
      `--endpoints=https://127.0.0.1:${clientPort}`,
      `--cacert=${join(pki, 'etcd/ca.crt')}`,
      `--cert=${join(pki, 'apiserver-etcd-client.crt')}`,
      `--key=${join(pki, 'apiserver-etcd-client.key')}`,
      ...args,
    ],
    { encoding, timeout: 30_000 },
  );
}

/** The value etcd stores at `key` (e.g. /registry/secrets/default/NAME), or null when there is none. */
export async function etcdRaw(host: LabHost, dataDir: string, key: string, clientPort = 2379): Promise<Buffer | null> {
  const r = await etcdctl(host, dataDir, clientPort, ['get', key, '--print-value-only'], 'buffer');
  if (r.exitCode !== 0) throw new Error(`etcdctl get ${key}: ${Buffer.from(r.stderr as Uint8Array).toString()}`);
  const out = Buffer.from(r.stdout as Uint8Array);
  // etcdctl ends the value with a newline; nothing at all for a missing key.
  return out.length === 0 ? null : out.subarray(0, out.length - 1);
}

/** Every key under `prefix` in etcd. */
export async function etcdKeys(host: LabHost, dataDir: string, prefix: string, clientPort = 2379): Promise<string[]> {
  const r = await etcdctl(host, dataDir, clientPort, ['get', prefix, '--prefix', '--keys-only'], 'utf8');
  if (r.exitCode !== 0) throw new Error(`etcdctl get ${prefix} --prefix: ${String(r.stderr)}`);
  return String(r.stdout).split('\n').filter(Boolean);
}

/** The newest value kine's SQLite file (<data-dir>/db/state.db) holds for `key`, or null. */
export function sqliteRaw(dataDir: string, key: string): Buffer | null {
  const db = new DatabaseSync(join(dataDir, 'db', 'state.db'), { readOnly: true });
  try {
    const row = db.prepare('SELECT value, deleted FROM kine WHERE name = ? ORDER BY id DESC LIMIT 1').get(key) as
      { value: Uint8Array | null; deleted: number } | undefined;
    return row && !row.deleted && row.value ? Buffer.from(row.value) : null;
  } finally {
    db.close();
  }
}
