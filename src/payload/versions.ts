// Staged versions. Each kctl build stages its component binaries into a directory of its own
// under the bin root, `<data-dir>/bin/<kctl version>-<12 hex digits naming its components>`, and
// the symlink `<data-dir>/bin/current` names the one the kctl that last started uses. What kctl
// starts, and what containerd hands the shims of containers that outlive kctl's restart (runc's
// path), goes through `current`, so nothing keeps a path into a directory that goes away.
//
// An upgrade stages the new directory (linking the components whose bytes did not change from the
// previous one: only the changed ones are decompressed) and turns `current` to it. The previous
// version's directory stays until that upgrade is done (pruneStages), so a rollback to the
// previous kctl finds its binaries staged and decompresses nothing. Files directly in the bin root
// are the layout of kctl before this one: they count as the previous version. `kctl reset`
// removes the whole bin root.
import { createHash } from 'node:crypto';
import { lstat, readdir, readlink, rename, rm, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../base/log.ts';
import type { Payload } from './payload.ts';

/** The symlink naming the staged version in use. */
export const CURRENT = 'current';
/** The symlink naming the version `current` named before, kept until its upgrade is done. */
export const PREVIOUS = 'previous';
/** The previous version when it was staged in the older layout (files directly in the bin root). */
export const OLDER_LAYOUT = 'bin root (older layout)';

const STAGE_NAME = /^[0-9A-Za-z.+_~-]+-[0-9a-f]{12}$/;
const LINKS = [CURRENT, PREVIOUS];

/** The directory name of a payload's components: its kctl version and a digest of every component's path and bytes. */
export function stageId(payload: Payload): string {
  const h = createHash('sha256');
  for (const e of [...payload.index.components].sort((a, b) => (a.path < b.path ? -1 : 1)))
    h.update(`${e.path} ${e.sha256}\n`);
  return `${payload.index.kctl.replace(/[^0-9A-Za-z.+_~-]/g, '_')}-${h.digest('hex').slice(0, 12)}`;
}

/** The stage a link names: a stage directory, OLDER_LAYOUT for the bin root itself, or none. */
async function named(root: string, link: string): Promise<string | undefined> {
  const target = await readlink(join(root, link)).catch(() => undefined);
  if (target === '.') return OLDER_LAYOUT;
  return target !== undefined && STAGE_NAME.test(target) ? target : undefined;
}

/** The stage `current` names, if any. */
export const currentStage = (root: string): Promise<string | undefined> => named(root, CURRENT);
/** The stage `previous` names, if any. */
export const previousStage = (root: string): Promise<string | undefined> => named(root, PREVIOUS);

/** `link` names `target` from now on, atomically (a new symlink renamed over the old one). */
async function pointLink(root: string, link: string, target: string): Promise<void> {
  const tmp = join(root, `.${link}.${process.pid}.${Date.now()}`);
  await symlink(target, tmp);
  try {
    await rename(tmp, join(root, link));
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}

/** What lies in the bin root: stage directories, and the entries of the older layout. */
async function rootEntries(root: string): Promise<{ stages: string[]; loose: string[] }> {
  const names = await readdir(root).catch(() => [] as string[]);
  const stages: string[] = [];
  const loose: string[] = [];
  for (const name of names) {
    if (LINKS.some((l) => name === l || name.startsWith(`.${l}.`))) continue;
    const isDir = (await lstat(join(root, name)).catch(() => undefined))?.isDirectory() ?? false;
    if (isDir && STAGE_NAME.test(name)) stages.push(name);
    else loose.push(name);
  }
  return { stages, loose };
}

/**
 * `current` names `id` from now on; the version it named before (or the older layout's files)
 * becomes `previous`. Returns that previous version when it changed, else undefined.
 */
export async function turnCurrent(root: string, id: string): Promise<string | undefined> {
  const current = await currentStage(root);
  if (current === id) return undefined;
  const older =
    current ??
    ((await rootEntries(root)).loose.some((n) => !n.startsWith('.') && n !== 'manifest.json')
      ? OLDER_LAYOUT
      : undefined);
  if (older !== undefined) await pointLink(root, PREVIOUS, older === OLDER_LAYOUT ? '.' : older);
  await pointLink(root, CURRENT, id);
  return older ?? 'none';
}

/**
 * Removes every staged version but those `current` and `previous` name. One whose binaries still
 * run goes all the same (the shim of a container that outlived an upgrade, say): a running
 * process keeps its file, and nothing starts from an old version's directory again (every start
 * goes through `current`). Returns what it removed.
 */
export async function pruneStages(root: string, log: Logger): Promise<string[]> {
  const keep = [await currentStage(root), await previousStage(root)];
  if (keep[0] === undefined) return []; // the older layout alone: nothing of this kctl's yet
  const { stages, loose } = await rootEntries(root);
  const removed: string[] = [];
  for (const name of stages) {
    if (keep.includes(name)) continue;
    await rm(join(root, name), { recursive: true, force: true });
    removed.push(name);
  }
  if (!keep.includes(OLDER_LAYOUT) && loose.length) {
    for (const name of loose) await rm(join(root, name), { recursive: true, force: true });
    removed.push(OLDER_LAYOUT);
  }
  if (removed.length) log.info({ removed, current: keep[0] }, 'removed the staged binaries of earlier kctl versions');
  return removed;
}

/** The upgrade to `current` is done: the previous version's binaries go. */
export async function upgradeDone(root: string, log: Logger): Promise<string[]> {
  if ((await previousStage(root)) === undefined) return [];
  await rm(join(root, PREVIOUS), { force: true });
  return pruneStages(root, log);
}
