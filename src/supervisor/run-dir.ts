// The run dir (--run-dir, default /run/kctl): pid files and sockets. `kctl reset` removes a run
// dir only when it carries RUN_DIR_MARKER, which kctl writes into a run dir it creates, so a
// mistaken `--run-dir /` or `--run-dir /home/x` loses nothing.
import { existsSync } from 'node:fs';
import { lstat, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { removeTree } from '../base/fs.ts';
import type { Logger } from '../base/log.ts';

export const RUN_DIR_MARKER = '.kctl-run-dir';

/**
 * Makes the run dir (0700) and marks it as kctl's if kctl made it now. A directory that was
 * already there stays as it is: kctl uses it, and reset leaves it unless an earlier kctl made it.
 */
export async function prepareRunDir(dir: string): Promise<void> {
  if (existsSync(dir)) return;
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await writeFile(join(dir, RUN_DIR_MARKER), 'made by kctl: kctl reset removes this directory\n', {
    mode: 0o600,
    flag: 'wx',
  }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'EEXIST') throw err; // another kctl made it at the same moment
  });
}

/** Whether `dir` is a run dir kctl made: the marker is a regular file in it. */
export async function isKctlRunDir(dir: string): Promise<boolean> {
  return (await lstat(join(dir, RUN_DIR_MARKER)).catch(() => undefined))?.isFile() === true;
}

/** `kctl reset`: removes the run dir, each entry logged, if it is kctl's; otherwise says so in one line and removes nothing. */
export async function removeRunDir(dir: string, log: Logger): Promise<void> {
  if (!existsSync(dir)) return;
  if (!(await isKctlRunDir(dir))) {
    log.warn(
      { path: dir },
      `left ${dir} as it is: it has no ${RUN_DIR_MARKER}, so kctl did not make it (remove kctl's pid files and sockets there by hand)`,
    );
    return;
  }
  for (const removed of await removeTree(dir)) log.info({ path: removed }, `removed ${removed}`);
}
