// Atomic file writes for everything kctl writes (keys, kubeconfigs, component configs, state):
// a temp file in the same dir, fsync, rename, fsync of the dir, so a crash or power cut never
// leaves a half-written file that would block the next start. Also: removing a tree, and a
// file's sha256 (staging and backups check files against the sums they carry).
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, open, readdir, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

export async function writeFileAtomic(path: string, data: string | Buffer, mode: number): Promise<void> {
  const dir = dirname(path);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  // pid + random: two kctl processes (or two calls) never share a temp file.
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

/**
 * Removes each entry of `dir`, then `dir` itself; returns the paths removed (entries in name
 * order, then `dir`), so a caller can say what went. [] when `dir` does not exist.
 */
export async function removeTree(dir: string): Promise<string[]> {
  let names: string[];
  try {
    names = (await readdir(dir)).sort();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const removed: string[] = [];
  for (const name of names) {
    await rm(join(dir, name), { recursive: true, force: true });
    removed.push(join(dir, name));
  }
  await rm(dir, { recursive: true, force: true });
  return [...removed, dir];
}

/** sha256 (hex) of a file, or null when it does not exist; `buf` is the read buffer (reuse one for many files). */
export async function sha256OfFile(path: string, buf: Buffer = Buffer.allocUnsafe(1024 * 1024)): Promise<string | null> {
  let fh;
  try {
    fh = await open(path, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  try {
    const hash = createHash('sha256');
    for (;;) {
      const { bytesRead } = await fh.read(buf, 0, buf.length, null);
      if (bytesRead === 0) return hash.digest('hex');
      hash.update(buf.subarray(0, bytesRead));
    }
  } finally {
    await fh.close();
  }
}
