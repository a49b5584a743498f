// A kine database on PostgreSQL, checked before kine starts. kine itself creates a missing
// database, but a role without CREATEDB, a wrong password or an unreachable server make it retry
// forever with nothing but its own log lines; kctl asks first and answers in one line.
import postgres from 'postgres';
import { UserError } from '../base/errors.ts';

export interface DatabaseCheck {
  /** The database kctl created just now. */
  created: boolean;
  /** The database already holds kine's table: some control plane's state is in it. */
  inUse: boolean;
}

/** The database a postgres:// data source names ('' when it names none). */
export function postgresDatabase(dataSource: string): string {
  return decodeURIComponent(new URL(dataSource).pathname.replace(/^\//, ''));
}

/** The data source with another database, credentials and options unchanged. */
export function withPostgresDatabase(dataSource: string, database: string): string {
  const u = new URL(dataSource);
  u.pathname = `/${encodeURIComponent(database)}`;
  return u.toString();
}

export const isPostgres = (dataSource: string | undefined): dataSource is string =>
  !!dataSource && /^postgres(ql)?:\/\//.test(dataSource);

/** host:port and role, never the password: what an error line may name. */
function describe(dataSource: string): { where: string; role: string } {
  const u = new URL(dataSource);
  return { where: `${u.hostname}:${u.port || 5432}`, role: decodeURIComponent(u.username) || 'postgres' };
}

function client(dataSource: string) {
  // One short-lived connection; no notices on stdout; sslmode in the URL is honoured by the driver.
  return postgres(dataSource, { max: 1, connect_timeout: 5, idle_timeout: 1, onnotice: () => undefined });
}

function failure(err: unknown, dataSource: string, database: string): UserError {
  const e = err as { code?: string; message?: string };
  const { where, role } = describe(dataSource);
  const msg = (e.message ?? String(err)).split('\n')[0];
  switch (e.code) {
    case '28P01':
    case '28000':
      return new UserError(
        `PostgreSQL at ${where} refused role "${role}" (${msg}); fix the user or password in spec.storage.kine.dataSource`,
      );
    case '42501':
      return new UserError(
        `role "${role}" may not create database "${database}" on PostgreSQL at ${where} (${msg}); create it for that role (CREATE DATABASE "${database}" OWNER "${role}") or grant the role CREATEDB`,
      );
    case 'ECONNREFUSED':
    case 'ENOTFOUND':
    case 'EHOSTUNREACH':
    case 'ETIMEDOUT':
    case 'CONNECT_TIMEOUT':
      return new UserError(
        `cannot reach PostgreSQL at ${where} (${e.code}); check spec.storage.kine.dataSource and that the server runs`,
      );
    default:
      return new UserError(
        `PostgreSQL at ${where}, database "${database}": ${msg}; check spec.storage.kine.dataSource`,
      );
  }
}

/**
 * Makes sure the database of `dataSource` exists (creating it when the role may) and says whether
 * kine's table is already in it. Throws one line naming host, port, role and database, never the password.
 */
export async function ensurePostgresDatabase(dataSource: string): Promise<DatabaseCheck> {
  const database = postgresDatabase(dataSource);
  if (!database)
    throw new UserError(`spec.storage.kine.dataSource names no database; add one (postgres://user@host:5432/NAME)`);
  let created = false;
  const target = client(dataSource);
  try {
    try {
      await target`select 1`;
    } catch (err) {
      if ((err as { code?: string }).code !== '3D000') throw failure(err, dataSource, database);
      // Missing: create it through the maintenance database, as createdb does.
      const admin = client(withPostgresDatabase(dataSource, 'postgres'));
      try {
        await admin`create database ${admin(database)}`;
        created = true;
      } catch (e) {
        if ((e as { code?: string }).code !== '42P04') throw failure(e, dataSource, database); // 42P04: created meanwhile
      } finally {
        await admin.end({ timeout: 1 });
      }
    }
    const [row] = await target<{ kine: string | null }[]>`select to_regclass('kine')::text as kine`;
    return { created, inUse: !!row?.kine };
  } catch (err) {
    throw err instanceof UserError ? err : failure(err, dataSource, database);
  } finally {
    await target.end({ timeout: 1 });
  }
}

/**
 * Drops the database of `dataSource` (through the maintenance database, as dropdb does), ending
 * the sessions still in it; a database that is gone already is fine. Throws one line as above.
 */
export async function dropPostgresDatabase(dataSource: string): Promise<void> {
  const database = postgresDatabase(dataSource);
  if (!database) throw new UserError('the data source names no database to drop');
  const admin = client(withPostgresDatabase(dataSource, 'postgres'));
  try {
    await admin`drop database if exists ${admin(database)} with (force)`;
  } catch (err) {
    throw failure(err, dataSource, database);
  } finally {
    await admin.end({ timeout: 1 });
  }
}

/** A database or role name kctl makes (lower-case letters, digits, '_'), safe to quote in DDL. */
const OWN_NAME = /^[a-z_][a-z0-9_]{0,62}$/;
/** A password kctl makes (letters and digits), safe as a DDL literal. */
const OWN_PASSWORD = /^[A-Za-z0-9]{16,128}$/;

/** The data source for `role` with `password` and its database `database`, on the server of `dataSource`. */
export function withPostgresLogin(dataSource: string, o: { role: string; password: string; database: string }): string {
  const u = new URL(withPostgresDatabase(dataSource, o.database));
  u.username = encodeURIComponent(o.role);
  u.password = encodeURIComponent(o.password);
  return u.toString();
}

/**
 * One hosted cluster's place on a shared PostgreSQL, made through `adminSource` (a role that may
 * create databases and roles): a login role `name` with `password`, owning a database `name` that
 * no other role may connect to. Existing ones are kept (the role's password set to `password`).
 * Returns the cluster's own data source and whether kine's table is already in its database.
 */
export async function ensurePostgresTenant(
  adminSource: string,
  o: { name: string; password: string },
): Promise<{ dataSource: string; inUse: boolean }> {
  const { name, password } = o;
  if (!OWN_NAME.test(name) || !OWN_PASSWORD.test(password))
    throw new Error(`not a database name and password kctl makes: ${name}`);
  const admin = client(adminSource);
  const { where, role } = describe(adminSource);
  try {
    const [me] = await admin<{ super: boolean }[]>`select rolsuper as super from pg_roles where rolname = current_user`;
    const [exists] = await admin`select 1 from pg_roles where rolname = ${name}`;
    try {
      await admin.unsafe(`${exists ? 'alter' : 'create'} role "${name}" login password '${password}'`);
      // A role that is no superuser may make a database owned by another only as a member of it.
      if (!me?.super) await admin.unsafe(`grant "${name}" to current_user`);
    } catch (err) {
      if ((err as { code?: string }).code === '42501')
        throw new UserError(
          `role "${role}" may not create roles on PostgreSQL at ${where}; grant it CREATEROLE (ALTER ROLE "${role}" CREATEROLE) or name a role that has it`,
        );
      throw err;
    }
    const [db] = await admin<{ owner: string }[]>`
      select pg_get_userbyid(datdba) as owner from pg_database where datname = ${name}`;
    if (!db) await admin.unsafe(`create database "${name}" owner "${name}"`);
    else if (db.owner !== name) await admin.unsafe(`alter database "${name}" owner to "${name}"`);
    await admin.unsafe(`revoke all on database "${name}" from public`);
  } catch (err) {
    throw err instanceof UserError ? err : failure(err, adminSource, name);
  } finally {
    await admin.end({ timeout: 1 });
  }
  const dataSource = withPostgresLogin(adminSource, { role: name, password, database: name });
  return { dataSource, inUse: (await ensurePostgresDatabase(dataSource)).inUse };
}

/** Drops a hosted cluster's database (its sessions ended) and then its role; either gone already is fine. */
export async function dropPostgresTenant(adminSource: string, name: string): Promise<void> {
  if (!OWN_NAME.test(name)) throw new Error(`not a database name kctl makes: ${name}`);
  await dropPostgresDatabase(withPostgresDatabase(adminSource, name));
  const admin = client(adminSource);
  try {
    await admin.unsafe(`drop role if exists "${name}"`);
  } catch (err) {
    throw failure(err, adminSource, name);
  } finally {
    await admin.end({ timeout: 1 });
  }
}
