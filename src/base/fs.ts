// Atomic file writes for everything kctl writes (keys, kubeconfigs, component configs, state):
// a temp file in the same dir, fsync, rename, fsync of the dir, so a crash or power cut never
// leaves a half-written file that would block the next start. Also: removing a tree (never
// through a mount point), the mount points below a dir, and a file's sha256 (staging and backups
// check files against the sums they carry).
import { createHash, randomBytes } from 'node:crypto';
import { chmod, mkdir, open, readFile, readdir, realpath, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import lockfile from 'proper-lockfile';
import { errnoOf, UserError } from './errors.ts';

/**
 * Runs `fn` holding the lock file `<dir>/<name>` (`dir` must exist), waiting up to
 * `waitMs` for another holder. proper-lockfile: a holder that dies leaves a lock that goes stale
 * after 30 s.
 */
export async function withDirLock<T>(dir: string, name: string, fn: () => Promise<T>, waitMs = 60_000): Promise<T> {
  const release = await lockfile.lock(dir, {
    lockfilePath: join(dir, name),
    stale: 30_000,
    update: 5_000,
    retries: { retries: Math.ceil(waitMs / 100), factor: 1, minTimeout: 50, maxTimeout: 150 },
  });
  try {
    return await fn();
  } finally {
    await release();
  }
}

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
 * mkdir -p giving every directory it makes exactly `mode`, whatever the umask (kctl's is 0077):
 * for directories other users must reach. Directories that exist keep their mode.
 */
export async function mkdirShared(dir: string, mode = 0o755): Promise<void> {
  const first = await mkdir(dir, { recursive: true, mode });
  if (first === undefined) return;
  for (let d = dir; ; d = dirname(d)) {
    await chmod(d, mode);
    if (d === first || d === dirname(d)) return;
  }
}

/** Mount points strictly below any of `dirs` (overlay rootfs, pod netns, kubelet volumes), deepest first. */
export async function mountsUnder(dirs: string[]): Promise<string[]> {
  // mountinfo names mount points by their real path: compare with the dirs' real paths too.
  const real = await Promise.all(dirs.map((d) => realpath(d).catch(() => d)));
  const prefixes = [...dirs, ...real].map((d) => (d.endsWith('/') ? d : `${d}/`));
  const text = await readFile('/proc/self/mountinfo', 'utf8');
  const points = text
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((p): p is string => !!p)
    .map((p) => p.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8))))
    .filter((p) => prefixes.some((d) => p.startsWith(d)));
  return [...new Set(points)].sort((a, b) => b.length - a.length);
}

/**
 * Removes each entry of `dir`, then `dir` itself; returns the paths removed (entries in name
 * order, then `dir`), so a caller can say what went. [] when `dir` does not exist. Refuses,
 * removing nothing, while anything is mounted below `dir`: a recursive delete would go on into
 * the mounted file system (a pod's hostPath volume is a directory of the host).
 */
export async function removeTree(dir: string): Promise<string[]> {
  let names: string[];
  try {
    names = (await readdir(dir)).sort();
  } catch (err) {
    if (errnoOf(err) === 'ENOENT') return [];
    throw err;
  }
  // The shortest path is named: a mount that holds others comes before them.
  const mounted = (await mountsUnder([dir])).at(-1);
  if (mounted)
    throw new UserError(
      `${mounted} is still mounted: nothing under ${dir} was removed; unmount it (umount -R ${mounted}) and try again`,
    );
  const removed: string[] = [];
  for (const name of names) {
    await rm(join(dir, name), { recursive: true, force: true });
    removed.push(join(dir, name));
  }
  await rm(dir, { recursive: true, force: true });
  return [...removed, dir];
}

/** sha256 (hex) of a file, or null when it does not exist; `buf` is the read buffer (reuse one for many files). */
export async function sha256OfFile(
  path: string,
  buf: Buffer = Buffer.allocUnsafe(1024 * 1024),
): Promise<string | null> {
  let fh;
  try {
    fh = await open(path, 'r');
  } catch (err) {
    if (errnoOf(err) === 'ENOENT') return null;
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
