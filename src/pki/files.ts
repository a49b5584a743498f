// File primitives for the PKI: every write is atomic (temp file in the same dir, fsync,
// rename, fsync dir) so a crash or power cut never leaves a half-written key or cert that
// would block the next start.
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, open, readFile, rename, rm, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { Logger } from '../log/logger.ts';

export const KEY_MODE = 0o600;
export const CERT_MODE = 0o644;
export const KUBECONFIG_MODE = 0o600;
export const DIR_MODE = 0o700;

/** The file's text, or null when it does not exist. */
export async function readIfExists(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

export async function writeFileAtomic(path: string, data: string, mode: number): Promise<void> {
  const dir = dirname(path);
  const tmp = join(dir, `.${basename(path)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  try {
    // Created with the final mode so key material is never readable by others, not even briefly.
    const fh = await open(tmp, 'wx', mode);
    try {
      await fh.writeFile(data);
      await fh.chmod(mode); // the umask may have masked bits we want (0644 certs)
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
  await syncDir(dir);
}

async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
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
