// Tenant control planes: many controllers on one host, each `kctl controller --name NAME`: api-only
// by default, or a full cluster with its own nodes (spec.profile: full).
//   <data-dir>/tenants/NAME/       the tenant's data dir (PKI with its own CA, kine or etcd, tenant.json)
//   <run-dir>/tenants/NAME/        its run dir (status.sock, pid files)
//   <data-dir>/bin/                ONE staged copy of the binaries that every tenant runs
// tenant.json records the ports chosen on the first start, so they stay the same across restarts.
// The first start of every tenant takes a lock on <data-dir>/tenants, so ten starting at once
// never pick the same database, and claims its ports host-wide (host/port-claims.ts), so tenants
// under different --data-dirs never pick the same port.
import { mkdir, readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { parse } from 'yaml';
import { UserError } from '../../base/errors.ts';
import { liveOwner } from '../../supervisor/owner.ts';
import {
  CLAIM_GRACE_MS,
  claimPorts,
  PortClaimConflict,
  releasePorts,
  type PortClaim,
  type RangeUse,
} from '../../host/port-claims.ts';
import { withDirLock, writeFileAtomic } from '../../base/fs.ts';
import type { Logger } from '../../base/log.ts';
import { datastoreIdentity } from '../../etcd/kine.ts';
import { ensurePostgresDatabase, isPostgres, postgresDatabase, withPostgresDatabase } from '../../etcd/postgres.ts';
import type { ClusterConfig } from '../config/config.ts';
import { TENANT_NAME, type TenantLayout } from './tenant-layout.ts';

export { TENANT_NAME, checkTenantName, tenantLayout, type TenantLayout } from './tenant-layout.ts';

export const TENANT_FILE = 'tenant.json';
/** Where tenants' ports come from unless --port-range says otherwise. */
export const DEFAULT_PORT_RANGE = '16000-16999';

export interface TenantPorts {
  api: number;
  controllerManager: number;
  etcdClient?: number;
  etcdPeer?: number;
  /** A full cluster's (spec.profile: full): where its nodes and controllers reach it, and its scheduler. */
  join?: number;
  agent?: number;
  admin?: number;
  scheduler?: number;
}

/** The ports of a full cluster beyond an api-only control plane's, in the order they are picked. */
const FULL_PORTS = ['join', 'agent', 'admin', 'scheduler'] as const;

export interface TenantRecord {
  name: string;
  /** Absent in records from before full clusters: api-only. */
  profile?: 'api-only' | 'full';
  ports: TenantPorts;
  /** The shared database (kine on PostgreSQL), without credentials; two tenants never share one. */
  datastore?: string;
  created: string;
}

export function parsePortRange(text: string): [number, number] {
  const m = /^(\d{1,5})-(\d{1,5})$/.exec(text);
  const [lo, hi] = m ? [Number(m[1]), Number(m[2])] : [0, 0];
  if (!m || lo < 1 || hi > 65535 || lo > hi)
    throw new UserError(`--port-range "${text}" is not FROM-TO (1-65535, FROM <= TO), e.g. ${DEFAULT_PORT_RANGE}`);
  return [lo, hi];
}

function parseRecord(text: string): TenantRecord | undefined {
  try {
    const r = JSON.parse(text) as Partial<TenantRecord>;
    return typeof r.name === 'string' && r.ports && Number.isInteger(r.ports.api) ? (r as TenantRecord) : undefined;
  } catch {
    return undefined;
  }
}

export async function readTenant(dataDir: string): Promise<TenantRecord | undefined> {
  const text = await readFile(join(dataDir, TENANT_FILE), 'utf8').catch(() => undefined);
  return text === undefined ? undefined : parseRecord(text);
}

/** Every tenant recorded under `tenantsDir`, by name. */
export async function readTenants(tenantsDir: string): Promise<TenantRecord[]> {
  const names = (await readdir(tenantsDir).catch(() => [] as string[])).filter((n) => TENANT_NAME.test(n)).sort();
  const records = await Promise.all(names.map((n) => readTenant(join(tenantsDir, n))));
  return records.filter((r): r is TenantRecord => r !== undefined);
}

/** The API address a tenant last started with (its effective config), for listings. */
export async function tenantApiAddress(dataDir: string): Promise<string | undefined> {
  const text = await readFile(join(dataDir, 'cluster-config.yaml'), 'utf8').catch(() => undefined);
  const cfg = text === undefined ? undefined : (parse(text) as { spec?: { api?: { address?: string } } } | null);
  return cfg?.spec?.api?.address;
}

/** What a tenant does about a recorded port in use: its ports are its record's, not the config's. */
export const tenantPortAdvice = (name: string): string =>
  `free it, or stop tenant "${name}" and reset it (kctl --name ${name} reset) so that it picks new ports`;

/** A claim stands while the tenant that made it exists and records the port. */
async function tenantHolds(claim: PortClaim): Promise<boolean> {
  const record = await readTenant(claim.owner);
  return !!record && (Object.values(record.ports) as number[]).includes(claim.port);
}

/** "no 6 free ports left in --port-range A-B for tenant "x": 12 claimed by other tenants (...), 1 in use by another program". */
function rangeUsedUp(want: number, range: [number, number], name: string, use: RangeUse): string {
  const why = [
    use.claimed &&
      `${use.claimed} claimed by other tenants on this host${use.inGrace ? ` (${use.inGrace} of them by tenants removed in the last ${CLAIM_GRACE_MS / 60_000} minutes, free after that)` : ''}`,
    use.excluded && `${use.excluded} recorded by tenants of this data dir`,
    use.listening && `${use.listening} in use by another program`,
  ].filter(Boolean);
  return `no ${want} free ports left in --port-range ${range[0]}-${range[1]} for tenant "${name}"${why.length ? `: ${why.join(', ')}` : ''}`;
}

/** Claims the tenant's recorded ports host-wide again (tenants from before claims, and after a reboot of the file). */
async function reclaimPorts(layout: TenantLayout, record: TenantRecord): Promise<void> {
  try {
    await claimPorts({
      owner: layout.dataDir,
      label: `tenant "${layout.name}"`,
      recorded: Object.values(record.ports) as number[],
      stillHeld: tenantHolds,
    });
  } catch (err) {
    if (!(err instanceof PortClaimConflict)) throw err;
    throw new UserError(
      `tenant "${layout.name}" records port ${err.port}, which ${err.holder.label} (${err.holder.owner}) holds too; ${tenantPortAdvice(layout.name).replace(/^free it, or /, '')}`,
    );
  }
}

/** The config as this tenant runs it: its recorded ports, and its own database on a shared PostgreSQL. */
export function tenantConfig(cfg: ClusterConfig, record: TenantRecord, dataSource: string | undefined): ClusterConfig {
  const s = cfg.spec;
  return {
    ...cfg,
    spec: {
      ...s,
      api: { ...s.api, port: record.ports.api, joinPort: record.ports.join ?? s.api.joinPort },
      konnectivity: {
        ...s.konnectivity,
        agentPort: record.ports.agent ?? s.konnectivity.agentPort,
        adminPort: record.ports.admin ?? s.konnectivity.adminPort,
      },
      scheduler: { ...s.scheduler, port: record.ports.scheduler ?? s.scheduler.port },
      controllerManager: { ...s.controllerManager, port: record.ports.controllerManager },
      storage: {
        ...s.storage,
        etcd: {
          ...s.storage.etcd,
          clientPort: record.ports.etcdClient ?? s.storage.etcd.clientPort,
          peerPort: record.ports.etcdPeer ?? s.storage.etcd.peerPort,
        },
        kine: { ...s.storage.kine, dataSource },
      },
    },
  };
}

/**
 * A postgres:// data source without a database gets the tenant's own, kctl_NAME; one that names a
 * database keeps it. SQLite and etcd live in the tenant's data dir anyway.
 */
export function tenantDataSource(dataSource: string | undefined, name: string): string | undefined {
  if (!isPostgres(dataSource) || postgresDatabase(dataSource)) return dataSource;
  return withPostgresDatabase(dataSource, `kctl_${name.replace(/-/g, '_')}`);
}

export interface TenantStartOptions {
  /** A controller joining the named cluster on other hosts (--token-file): its database holds the cluster's state already. */
  joining?: boolean;
}

export interface TenantStart {
  cfg: ClusterConfig;
  record: TenantRecord;
  created: boolean;
}

/**
 * The tenant's record, made on its first start: free ports from `range` that no other tenant
 * recorded, and its database when kine is on PostgreSQL. Everything is checked before the record
 * is written, so a refusal leaves no tenant behind.
 */
export async function prepareTenant(
  layout: TenantLayout,
  cfg: ClusterConfig,
  range: [number, number],
  log: Logger,
  o: TenantStartOptions = {},
): Promise<TenantStart> {
  await mkdir(layout.tenantsDir, { recursive: true, mode: 0o755 });
  return withDirLock(layout.tenantsDir, '.lock', async () => {
    const others = (await readTenants(layout.tenantsDir)).filter((r) => r.name !== layout.name);
    const existing = await readTenant(layout.dataDir);
    const dataSource = tenantDataSource(cfg.spec.storage.kine.dataSource, layout.name);
    const datastore = cfg.spec.storage.type === 'kine' ? datastoreIdentity(dataSource) : undefined;
    const sharing = datastore && others.find((r) => r.datastore === datastore);
    if (sharing)
      throw new UserError(
        `tenant "${sharing.name}" already keeps its state in ${datastore}; tenants never share a database: name another one, or none (kctl_NAME)`,
      );
    const profile = cfg.spec.profile === 'full' ? 'full' : 'api-only';
    if (existing && (existing.profile ?? 'api-only') !== profile)
      throw new UserError(
        `tenant "${layout.name}" is ${existing.profile ?? 'api-only'} (${TENANT_FILE}) and its config now says spec.profile: ${profile}; a tenant keeps its profile: undo the change, or reset it (kctl --name ${layout.name} reset) and start it anew`,
      );
    let ports = existing?.ports;
    if (existing) await reclaimPorts(layout, existing);
    if (!ports) {
      const etcd = cfg.spec.storage.type === 'etcd';
      const full = profile === 'full';
      const taken = new Set(others.flatMap((r) => Object.values(r.ports) as number[]));
      const want = 2 + (etcd ? 2 : 0) + (full ? FULL_PORTS.length : 0);
      // Host-wide: tenants under other --data-dirs pick from the same ports.
      const { ports: got, use } = await claimPorts({
        owner: layout.dataDir,
        label: `tenant "${layout.name}"`,
        count: want,
        range,
        exclude: taken,
        stillHeld: tenantHolds,
      });
      if (got.length < want)
        throw new UserError(`${rangeUsedUp(want, range, layout.name, use)}; give a wider --port-range`);
      const [api, controllerManager, ...rest] = got as [number, number, ...number[]];
      ports = { api, controllerManager };
      if (etcd) [ports.etcdClient, ports.etcdPeer] = rest.splice(0, 2);
      if (full) for (const k of FULL_PORTS) ports[k] = rest.shift()!;
    }
    const claimed = ports;
    // A new tenant refused below gives its claims back at once; nothing else of it exists yet.
    return undoneOnError(existing ? undefined : () => releasePorts(layout.dataDir), async () => {
      if (isPostgres(dataSource) && cfg.spec.storage.type === 'kine') {
        const db = await ensurePostgresDatabase(dataSource);
        // A new tenant meeting a database that already holds a control plane: another host's tenant of that name, or a reset one's.
        if (!existing && db.inUse && !o.joining)
          throw new UserError(
            `database ${datastore} already holds a control plane's state and this host has no tenant "${layout.name}"; tenants never share a database: pick another --name, or drop that database if it is left over`,
          );
        if (db.created) log.info({ datastore }, 'created the tenant database');
      }
      const record: TenantRecord = existing ?? {
        name: layout.name,
        profile,
        ports: claimed,
        ...(datastore ? { datastore } : {}),
        created: new Date().toISOString(),
      };
      if (!existing) {
        await mkdir(layout.dataDir, { recursive: true, mode: 0o700 });
        await writeFileAtomic(join(layout.dataDir, TENANT_FILE), JSON.stringify(record, null, 2) + '\n', 0o644);
        log.info({ tenant: layout.name, ports: record.ports }, 'tenant created');
      }
      return { cfg: tenantConfig(cfg, record, dataSource), record, created: !existing };
    });
  });
}

/** Runs `step`; when it fails, `undo` (if any) runs before the error goes on. */
async function undoneOnError<T>(undo: (() => Promise<unknown>) | undefined, step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (err) {
    await undo?.();
    throw err;
  }
}

/** A tenant already running is named as such; then its record (ports, database), made on its first start. */
export async function startTenant(
  layout: TenantLayout,
  range: [number, number],
  cfg: ClusterConfig,
  log: Logger,
  o: TenantStartOptions = {},
): Promise<TenantStart> {
  const running = await liveOwner(layout.dataDir);
  if (running)
    throw new UserError(
      `tenant "${layout.name}" is already running here (pid ${running.pid}); kctl status --name ${layout.name} shows it, a new tenant needs another --name`,
    );
  return prepareTenant(layout, cfg, range, log, o);
}

/**
 * A tenant this start made is removed again when what follows fails (a database that holds another
 * control plane, a join the cluster refused): a refused start leaves no tenant behind, and its
 * ports are free for the next start at once.
 */
export function undoNewTenant<T>(
  layout: TenantLayout,
  start: Pick<TenantStart, 'created'> | undefined,
  step: () => Promise<T>,
): Promise<T> {
  const undo = async () => {
    await rm(layout.dataDir, { recursive: true, force: true });
    await releasePorts(layout.dataDir);
  };
  return undoneOnError(start?.created ? undo : undefined, step);
}
