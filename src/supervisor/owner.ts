// Which kctl runs on a data dir and a run dir. `kctl controller` and `kctl worker` record their
// pid and role in <dir>/kctl-owner.json of both while they run, so `kctl reset` and a second
// start refuse before they touch anything (a second kctl on a shared run dir would otherwise
// replace the first one's sockets). A crash leaves the file behind and pids are reused, so the
// record also holds the boot id and the process start time: only the very process that wrote it
// counts as running, and a stale file never blocks anything.
import { link, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { errnoOf, UserError } from '../base/errors.ts';
import { processAlive, statFields } from './pidfile.ts';

export type KctlRole = 'controller' | 'worker';

export interface DataDirOwner {
  pid: number;
  role: KctlRole;
}

interface OwnerRecord extends DataDirOwner {
  bootId: string;
  /** Field 22 of /proc/<pid>/stat: clock ticks since boot; with the boot id, one process ever. */
  startTime: string;
}

export const OWNER_FILE = 'kctl-owner.json';

export function ownerFile(dataDir: string): string {
  return join(dataDir, OWNER_FILE);
}

async function bootId(): Promise<string> {
  return (await readFile('/proc/sys/kernel/random/boot_id', 'utf8')).trim();
}

/** The start time of `pid`, or undefined when it is gone. */
export async function processStartTime(pid: number): Promise<string | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    return statFields(stat)[22 - 3]; // starttime
  } catch {
    return undefined;
  }
}

function parseRecord(text: string): OwnerRecord | undefined {
  try {
    const r = JSON.parse(text) as Partial<OwnerRecord>;
    const ok =
      Number.isSafeInteger(r.pid) &&
      r.pid! > 0 &&
      (r.role === 'controller' || r.role === 'worker') &&
      typeof r.bootId === 'string' &&
      typeof r.startTime === 'string';
    return ok ? (r as OwnerRecord) : undefined;
  } catch {
    return undefined;
  }
}

/** The kctl that runs on `dataDir` now, or undefined (no file, a garbage file, a dead or reused pid). */
export async function liveOwner(dataDir: string): Promise<DataDirOwner | undefined> {
  let text: string;
  try {
    text = await readFile(ownerFile(dataDir), 'utf8');
  } catch (err) {
    if (errnoOf(err) === 'ENOENT') return undefined;
    throw err;
  }
  const r = parseRecord(text);
  if (!r || r.bootId !== (await bootId()) || !(await processAlive(r.pid))) return undefined;
  if ((await processStartTime(r.pid)) !== r.startTime) return undefined;
  return { pid: r.pid, role: r.role };
}

/** The record this process would write; exported for tests that fake an owner. */
export async function ownerRecord(pid: number, role: KctlRole): Promise<string> {
  const startTime = await processStartTime(pid);
  if (startTime === undefined) throw new Error(`pid ${pid} is not running`);
  return JSON.stringify({ pid, role, bootId: await bootId(), startTime } satisfies OwnerRecord) + '\n';
}

/**
 * Records this process as the `role` running on `dataDir`. Returns the other live kctl if one
 * holds it (nothing written then); a stale record is replaced. The file appears complete
 * (written aside, then hard-linked into place) and only if none is there, so two starts cannot
 * both win.
 */
export async function claimDataDir(dataDir: string, role: KctlRole): Promise<DataDirOwner | undefined> {
  await mkdir(dataDir, { recursive: true, mode: 0o755 });
  const file = ownerFile(dataDir);
  const tmp = `${file}.${process.pid}.tmp`;
  await writeFile(tmp, await ownerRecord(process.pid, role), { mode: 0o644 });
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        await link(tmp, file);
        return undefined;
      } catch (err) {
        if (errnoOf(err) !== 'EEXIST' || attempt > 0) throw err;
      }
      const other = await liveOwner(dataDir);
      if (other) return other;
      await rm(file, { force: true }); // stale: a kctl that crashed, or a pid since reused
    }
  } finally {
    await rm(tmp, { force: true });
  }
}

/** Removes the record on stop, if it is still this process's. */
export async function releaseDataDir(dataDir: string): Promise<void> {
  const owner = await liveOwner(dataDir).catch(() => undefined);
  if (owner?.pid === process.pid) await rm(ownerFile(dataDir), { force: true });
}

const busy = (other: DataDirOwner, dir: string): UserError =>
  new UserError(
    `a kctl ${other.role} (pid ${other.pid}) is already running on ${dir}; stop it first (kill -TERM ${other.pid}) or give this one its own --data-dir and --run-dir`,
  );

/** Refuses with one line when a live kctl holds any of `dirs` (a look only: nothing is written). */
export async function refuseIfOwned(dirs: string[]): Promise<void> {
  for (const dir of dirs) {
    const other = await liveOwner(dir);
    if (other && other.pid !== process.pid) throw busy(other, dir);
  }
}

/**
 * Runs `run` as the `role` on every one of `dirs` (data dir, run dir): refuses with one line when
 * another live kctl holds one of them, and removes the records afterwards, however `run` ends.
 */
export async function runOwning<T>(dirs: string[], role: KctlRole, run: () => Promise<T>): Promise<T> {
  const held: string[] = [];
  try {
    for (const dir of new Set(dirs)) {
      const other = await claimDataDir(dir, role);
      if (other) throw busy(other, dir);
      held.push(dir);
    }
    return await run();
  } finally {
    for (const dir of held) await releaseDataDir(dir);
  }
}
