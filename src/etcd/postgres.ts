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
