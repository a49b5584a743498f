// Which cluster on this host has which front-door name (frontdoor/router.ts routes by it). Every
// kctl controller with a front door registers its names and where they lead in the host state dir
// (one file per cluster, keyed by its data dir), whatever its --data-dir, and removes the file when
// it stops. A registration stands only while the kctl that wrote it runs on that data dir (its
// owner record: pid, boot, start time), so a crashed cluster's names lead nowhere, and every
// front door on the host reads the same files: any of them can route any name.
import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { UserError } from '../base/errors.ts';
import { withDirLock, writeFileAtomic } from '../base/fs.ts';
import { liveOwner } from '../supervisor/owner.ts';
import { hostStateDir } from './port-claims.ts';

export interface FrontDoorBackend {
  /** api, konnectivity or join. */
  endpoint: string;
  host: string;
  port: number;
  /** For kctl's own listeners: the key of the PROXY v2 header the door writes first (hex). */
  key?: string;
}

export interface FrontDoorRegistration {
  /** The cluster's name (a tenant's --name, or the cluster's metadata.name). */
  cluster: string;
  /** Its data dir: the registration stands while a kctl runs on it with `pid`. */
  dataDir: string;
  pid: number;
  /** Server name (lower case) → where it leads. */
  names: Record<string, FrontDoorBackend>;
}

/** A route as the router takes it. */
export interface FrontDoorTarget extends FrontDoorBackend {
  cluster: string;
}

/** How stale the router's view may get (a cluster that crashed stops getting connections within this). */
const REFRESH_MS = 1_000;

const registryDir = (): string => join(hostStateDir(), 'front-door');
const fileOf = (dataDir: string): string =>
  join(registryDir(), `${createHash('sha256').update(dataDir).digest('hex').slice(0, 16)}.json`);

function parse(text: string): FrontDoorRegistration | undefined {
  try {
    const r = JSON.parse(text) as Partial<FrontDoorRegistration>;
    const ok =
      typeof r.cluster === 'string' &&
      typeof r.dataDir === 'string' &&
      Number.isSafeInteger(r.pid) &&
      typeof r.names === 'object' &&
      r.names !== null;
    return ok ? (r as FrontDoorRegistration) : undefined;
  } catch {
    return undefined;
  }
}

/** Every registration that stands now (its kctl runs), read from the host state dir. */
export async function standingRegistrations(): Promise<FrontDoorRegistration[]> {
  const dir = registryDir();
  const files = (await readdir(dir).catch(() => [] as string[])).filter((f) => f.endsWith('.json'));
  const all = await Promise.all(files.map((f) => readFile(join(dir, f), 'utf8').then(parse, () => undefined)));
  const standing = await Promise.all(
    all.map(async (r) => (r && (await liveOwner(r.dataDir).catch(() => undefined))?.pid === r.pid ? r : undefined)),
  );
  return standing.filter((r): r is FrontDoorRegistration => r !== undefined);
}

/**
 * Registers `reg` (replacing this data dir's earlier registration). Refused with one line when a
 * standing registration of another data dir has one of its names: two clusters never share a name.
 */
export async function registerFrontDoor(reg: FrontDoorRegistration): Promise<void> {
  const dir = registryDir();
  await mkdir(dir, { recursive: true, mode: 0o755 });
  await withDirLock(dir, 'registry.lock', async () => {
    for (const other of await standingRegistrations()) {
      if (other.dataDir === reg.dataDir) continue;
      const taken = Object.keys(reg.names).find((n) => n in other.names);
      if (taken)
        throw new UserError(
          `front door name ${taken} belongs to cluster "${other.cluster}" on this host (pid ${other.pid}, data dir ${other.dataDir}); give this cluster another name or spec.frontDoor.baseDomain`,
        );
    }
    // 0600: the handoff keys let whoever reads them name any client address to the cluster's listeners.
    await writeFileAtomic(fileOf(reg.dataDir), JSON.stringify(reg, null, 2) + '\n', 0o600);
  });
}

/** Removes this data dir's registration if it is still `pid`'s. */
export async function unregisterFrontDoor(dataDir: string, pid = process.pid): Promise<void> {
  const file = fileOf(dataDir);
  const reg = parse(await readFile(file, 'utf8').catch(() => ''));
  if (reg?.pid === pid) await rm(file, { force: true });
}

/** The router's view of the registrations: read again when the folder changes, and at least every second. */
export class FrontDoorRoutes {
  private table = new Map<string, FrontDoorTarget>();
  private readAt = 0;
  private dirMtime = -1;
  private reading: Promise<void> | undefined;

  async route(name: string): Promise<FrontDoorTarget | undefined> {
    await this.fresh();
    return this.table.get(name.toLowerCase());
  }

  /** Every name that leads somewhere now, for `kctl status`. */
  async names(): Promise<Map<string, FrontDoorTarget>> {
    await this.fresh();
    return new Map(this.table);
  }

  private async fresh(): Promise<void> {
    const now = Date.now();
    const mtime = await stat(registryDir()).then(
      (s) => s.mtimeMs,
      () => 0,
    );
    if (mtime === this.dirMtime && now - this.readAt < REFRESH_MS) return;
    this.reading ??= this.read(mtime).finally(() => (this.reading = undefined));
    await this.reading;
  }

  private async read(mtime: number): Promise<void> {
    const table = new Map<string, FrontDoorTarget>();
    for (const r of await standingRegistrations())
      for (const [name, b] of Object.entries(r.names)) table.set(name.toLowerCase(), { ...b, cluster: r.cluster });
    this.table = table;
    this.dirMtime = mtime;
    this.readAt = Date.now();
  }
}
