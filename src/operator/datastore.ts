// A hosted cluster's data on the PostgreSQL its datastore Secret names: a database and a role of
// its own (etcd/postgres.ts makes them through the Secret's role), the role's password kept in the
// cluster's `<name>-datastore` Secret. Its pods get only their own role's data source (inside
// their config Secret), never the Secret's: one cluster's control plane cannot read another's data.
import { createHash, randomBytes } from 'node:crypto';
import { dropPostgresTenant, ensurePostgresTenant, isPostgres, withPostgresLogin } from '../etcd/postgres.ts';
import type { KubeClient } from '../kube/client.ts';
import { ownedNames, secret, secretPath, type KctlCluster } from './objects.ts';

interface SecretObject {
  data?: Record<string, string>;
}

/**
 * The database and role of a cluster: one per cluster, named by namespace and name, with a short
 * hash of both (team-a/b and team/a-b would read the same) and within PostgreSQL's 63 characters.
 */
export function databaseOf(c: KctlCluster): string {
  const { namespace, name } = c.metadata;
  const readable = `${namespace}_${name}`
    .toLowerCase()
    .replace(/[^a-z0-9_]/g, '_')
    .slice(0, 48);
  const hash = createHash('sha256').update(`${namespace}/${name}`).digest('hex').slice(0, 8);
  return `kctl_${readable}_${hash}`;
}

const secretData = (s: SecretObject | undefined, key: string) => {
  const v = s?.data?.[key];
  return v === undefined ? undefined : Buffer.from(v, 'base64').toString();
};

export class ClusterDatastore {
  constructor(
    private readonly kube: KubeClient,
    private readonly apply: { fieldManager: string; force: boolean },
  ) {}

  private async secretOf(c: KctlCluster, name: string): Promise<SecretObject | undefined> {
    return this.kube.find<SecretObject>(secretPath(c, name));
  }

  /** The data source of the role that makes databases and roles, from the Secret the spec names; or why there is none. */
  async adminSource(c: KctlCluster): Promise<{ admin: string } | { missing: string }> {
    const pg = c.spec.datastore?.postgres;
    if (!pg)
      return {
        missing: 'spec.datastore.postgres.secretName is required: a control plane in pods keeps its data outside them',
      };
    const dsn = secretData(await this.secretOf(c, pg.secretName), 'dataSource');
    if (!dsn || !isPostgres(dsn))
      return {
        missing: `Secret ${pg.secretName} has no postgres:// URL under the key dataSource; create it in namespace ${c.metadata.namespace}`,
      };
    return { admin: dsn };
  }

  /**
   * The cluster's own data source. Its database and role are made (or mended) on the server when
   * `check` says so (a new cluster, one not serving) or its password is new; `inUse` then says
   * whether kine's table was in the database already.
   */
  async dataSource(c: KctlCluster, admin: string, check: boolean): Promise<{ dataSource: string; inUse?: boolean }> {
    const name = databaseOf(c);
    const keep = ownedNames(c.metadata.name).datastore;
    let password = secretData(await this.secretOf(c, keep), 'password');
    if (!password) {
      password = randomBytes(24).toString('hex');
      await this.kube.apply(secret(c, keep, { password }), this.apply);
      check = true;
    }
    if (check) return ensurePostgresTenant(admin, { name, password });
    return { dataSource: withPostgresLogin(admin, { role: name, password, database: name }) };
  }

  /** A deleted cluster's database and role, dropped; false when its datastore Secret is gone (nothing to drop with). */
  async drop(c: KctlCluster): Promise<boolean> {
    const source = await this.adminSource(c);
    if ('missing' in source) return false;
    await dropPostgresTenant(source.admin, databaseOf(c));
    return true;
  }
}
