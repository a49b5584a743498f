// A private PostgreSQL server from Debian's binaries (npm test installs them in pretest), for the
// kine tests: on a loopback port of this host, or on a lab host's address for controllers in
// other lab hosts. Stopped and removed after the test.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { chown, mkdtemp, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import type { LabHost } from './lab.ts';

export interface Postgres {
  host: string;
  port: number;
  /** A kine data source for `database` (created), user postgres, no password (trust). */
  dataSource(database: string): Promise<string>;
  /** Runs one SQL statement as postgres (psql); its rows, one per line, fields joined by '|'. */
  sql(statement: string): Promise<string>;
}

async function pgIds(): Promise<[number, number]> {
  const uid = Number((await execa('id', ['-u', 'postgres'])).stdout);
  const gid = Number((await execa('id', ['-g', 'postgres'])).stdout);
  return [uid, gid];
}

/** Starts PostgreSQL on `port`: on 127.0.0.1, or inside `on` listening on its lab address and trusting `trust` (a CIDR). */
export async function startPostgres(
  t: { after: (fn: () => Promise<void>) => void },
  port: number,
  on?: { host: LabHost; trust: string },
  /** PostgreSQL's max_connections, when its default (100) is too few (many clusters on one server). */
  maxConnections?: number,
): Promise<Postgres> {
  const versions = await readdir('/usr/lib/postgresql').catch(() => [] as string[]);
  const bin = versions.length ? join('/usr/lib/postgresql', versions.sort().at(-1)!, 'bin') : '';
  assert.ok(
    bin && existsSync(join(bin, 'initdb')),
    'PostgreSQL server binaries missing: npm test installs Debian postgresql in pretest',
  );
  const dir = await mkdtemp('/tmp/kctl-pg-');
  await chown(dir, ...(await pgIds()));
  const address = on?.host.ip ?? '127.0.0.1';
  const asPg = async (cmd: string, args: string[]) => {
    const argv = ['--reuid=postgres', '--regid=postgres', '--init-groups', '--', cmd, ...args];
    const r = on
      ? await on.host.run('setpriv', argv, { cwd: dir })
      : await execa('setpriv', argv, { cwd: dir, reject: false });
    if (r.exitCode !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${String(r.stderr).trim()}`);
    return String(r.stdout);
  };
  await asPg(join(bin, 'initdb'), ['-D', join(dir, 'data'), '--auth=trust', '-U', 'postgres']);
  if (on) await asPg('sh', ['-c', `echo 'host all all ${on.trust} trust' >> ${join(dir, 'data', 'pg_hba.conf')}`]);
  await asPg(join(bin, 'pg_ctl'), [
    '-D',
    join(dir, 'data'),
    '-l',
    join(dir, 'log'),
    '-w',
    '-o',
    `-p ${port} -k ${dir} -c listen_addresses=${address}${maxConnections ? ` -c max_connections=${maxConnections}` : ''}`,
    'start',
  ]);
  t.after(async () => {
    await asPg(join(bin, 'pg_ctl'), ['-D', join(dir, 'data'), '-m', 'immediate', 'stop']).catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  });
  return {
    host: address,
    port,
    sql: (statement) =>
      asPg(join(bin, 'psql'), ['-h', address, '-p', String(port), '-U', 'postgres', '-At', '-c', statement]),
    async dataSource(database) {
      await asPg(join(bin, 'createdb'), ['-h', address, '-p', String(port), '-U', 'postgres', database]);
      return `postgres://postgres@${address}:${port}/${database}?sslmode=disable`;
    },
  };
}
