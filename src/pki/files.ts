// File primitives for the PKI. Every write is atomic (src/base/fs.ts), so a crash never
// leaves a half-written key or cert that would block the next start.
import { chmod, mkdir, readFile, stat } from 'node:fs/promises';
import type { Logger } from '../base/log.ts';
import { errnoOf } from '../base/errors.ts';

export { writeFileAtomic } from '../base/fs.ts';

export const KEY_MODE = 0o600;
export const CERT_MODE = 0o644;
export const KUBECONFIG_MODE = 0o600;
export const DIR_MODE = 0o700;

/** What every ensure step of one run shares. */
export interface EnsureContext {
  dir: string; // pki root, to log short file names
  now: Date;
  log: Logger;
}

/** What an ensure step did to its file(s). */
export type Outcome = 'created' | 'renewed' | 'unchanged';

/** The file's text, or null when it does not exist. */
export async function readIfExists(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if (errnoOf(err) === 'ENOENT') return null;
    throw err;
  }
}

/** Creates the dir if needed and tightens its mode; existing dirs with loose modes are fixed. */
export async function ensurePrivateDir(dir: string, log: Logger): Promise<void> {
  await mkdir(dir, { recursive: true, mode: DIR_MODE });
  await enforceMode(dir, DIR_MODE, log);
}

/** Fixes the mode of an existing file we keep unchanged (e.g. a key someone made world-readable). */
export async function enforceMode(path: string, mode: number, log: Logger): Promise<void> {
  const current = (await stat(path)).mode & 0o777;
  if (current === mode) return;
  await chmod(path, mode);
  log.warn({ file: path, from: current.toString(8), to: mode.toString(8) }, 'fixed file permissions');
}
