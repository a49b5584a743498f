// kine: an etcd API over SQLite (default, a file under the data dir) or a real SQL database,
// served on a unix socket for kube-apiserver.
import { execa } from 'execa';
import { existsSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { ComponentContext } from '../base/component.ts';
import { pollUntil } from '../base/probe.ts';
import { Supervisor } from '../supervisor/process.ts';

export interface KineOptions {
  binDir: string;
  runDir: string;
  /** Where the default SQLite file lives (used only without `dataSource`). */
  dbDir: string;
  socket: string;
  /** A kine data source URL (postgres://, mysql://, sqlite://); default SQLite under dbDir. */
  dataSource?: string;
  /** More of kine's environment (the Go runtime's GOGC). */
  env?: Record<string, string>;
  /** Its connection pool on a database server; kine's defaults where unset. */
  pool?: { maxOpen?: number; maxIdle?: number };
}

/**
 * Which database a kine data source names, without credentials or options: what two controllers
 * must agree on to share one cluster state (user and password may differ per controller).
 * undefined for SQLite, which lives in one controller's data dir and cannot be shared.
 */
export function datastoreIdentity(dataSource: string | undefined): string | undefined {
  if (!dataSource || dataSource.startsWith('sqlite:')) return undefined;
  let u: URL;
  try {
    u = new URL(dataSource);
  } catch {
    // mysql's DSN form (user:pass@tcp(host:3306)/db) is no URL: keep what follows the credentials.
    return dataSource.replace(/^([a-z]+:\/\/)[^@/]*@/, '$1').replace(/\?.*$/, '');
  }
  return `${u.protocol}//${u.host}${u.pathname}`;
}

/**
 * The secrets a data source holds: its password (as written and decoded) and a `password=` option.
 * kine's output is logged with them replaced; kctl's own lines name a datastore by
 * datastoreIdentity, which holds none.
 */
export function dataSourceSecrets(dataSource: string | undefined): string[] {
  if (!dataSource) return [];
  const found = new Set<string>();
  // mysql's DSN form (user:pass@tcp(host:3306)/db) is no URL: the password is what lies between the first ':' and the '@'.
  const userinfo = /^[a-z]+:\/\/[^:@/]*:([^@/]*)@/.exec(dataSource)?.[1];
  if (userinfo) found.add(userinfo);
  try {
    const u = new URL(dataSource);
    for (const p of [u.password, u.searchParams.get('password') ?? '']) if (p) found.add(p);
  } catch {
    /* not a URL: the userinfo above is all */
  }
  for (const p of [...found]) {
    try {
      found.add(decodeURIComponent(p));
    } catch {
      /* not percent-encoded */
    }
  }
  return [...found].filter((p) => p !== '');
}

export function kineDataSource(o: Pick<KineOptions, 'dataSource' | 'dbDir'>): string {
  return o.dataSource ?? `sqlite://${join(o.dbDir, 'state.db')}?_journal=WAL&cache=shared&_busy_timeout=30000`;
}

export function kineEndpoint(socket: string): string {
  return `unix://${socket}`;
}

/** Ready means a write and a read of a probe key through the etcd API both succeed. */
function kineReady(o: KineOptions): (signal: AbortSignal) => Promise<void> {
  const etcdctl = join(o.binDir, 'etcdctl');
  const base = ['--endpoints', kineEndpoint(o.socket), '--dial-timeout=2s', '--command-timeout=5s'];
  return (signal) =>
    pollUntil(
      signal,
      KINE,
      async () => {
        // A fresh key each time: kine, like kube-apiserver's use of etcd, only creates with a plain put.
        // etcdctl's gRPC client waits a second before it retries a socket that was not there yet.
        if (!existsSync(o.socket)) throw new Error(`${o.socket} does not exist yet`);
        const key = `/kctl/readiness-probe/${process.pid}-${Date.now()}`;
        const value = `probe-${Date.now()}`;
        const opts = { env: { ETCDCTL_API: '3' }, extendEnv: false };
        await execa(etcdctl, [...base, 'put', key, value], opts);
        const got = await execa(etcdctl, [...base, 'get', '--print-value-only', key], opts);
        await execa(etcdctl, [...base, 'del', key], { ...opts, reject: false });
        if (got.stdout.trim() !== value)
          throw new Error(`probe key read back "${got.stdout.trim()}", wrote "${value}"`);
      },
      100,
    ); // kine is up in well under a second, and kube-apiserver waits for this
}

/** The program: its binary in <bin>, its pid file in <run>, its component's name. */
export const KINE = 'kine';

export class KineComponent extends Supervisor {
  constructor(private readonly o: KineOptions) {
    super({
      name: KINE,
      binary: join(o.binDir, KINE),
      // No metrics listener: a fixed :8080 would collide between controllers on one host.
      // Compaction is kube-apiserver's (every 5 min, to the revision of 5 min before), as on etcd:
      // kine would otherwise keep the latest 1,000 revisions whatever it is asked, and a quiet
      // cluster's list continue tokens would outlive their compaction (a conformance spec waits
      // for one to expire; it failed on kine here, k3s and kine users report the same).
      args: [
        `--listen-address=${kineEndpoint(o.socket)}`,
        '--metrics-bind-address=0',
        '--log-format=json',
        '--compact-min-retain=0',
        ...(o.pool?.maxOpen !== undefined ? [`--datastore-max-open-connections=${o.pool.maxOpen}`] : []),
        // kine takes 0 as its default (20) and a negative number as none.
        ...(o.pool?.maxIdle !== undefined ? [`--datastore-max-idle-connections=${o.pool.maxIdle || -1}`] : []),
      ],
      // kine's --endpoint flag reads KINE_ENDPOINT: a database password in the environment is
      // readable by root only, where every user sees the command line (ps, /proc/<pid>/cmdline).
      env: { ...o.env, KINE_ENDPOINT: kineDataSource(o) },
      secrets: dataSourceSecrets(o.dataSource),
      runDir: o.runDir,
      ready: kineReady(o),
    });
  }

  override async init(ctx?: ComponentContext): Promise<void> {
    if (!this.o.dataSource) await mkdir(this.o.dbDir, { recursive: true, mode: 0o700 });
    await rm(this.o.socket, { force: true }); // a socket left by a killed kine blocks the bind
    await super.init(ctx);
  }
}
