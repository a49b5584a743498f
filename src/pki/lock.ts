// One lock on the PKI directory: a starting controller, the renewer and a CA rotation step never
// write its files at the same time (proper-lockfile: the lock goes stale if its holder dies).
import { join } from 'node:path';
import lockfile from 'proper-lockfile';

export async function withPkiLock<T>(dir: string, fn: () => Promise<T>): Promise<T> {
  const release = await lockfile.lock(dir, {
    lockfilePath: join(dir, '.pki.lock'),
    stale: 30_000,
    update: 5_000,
    retries: { retries: 600, factor: 1, minTimeout: 100, maxTimeout: 250 },
  });
  try {
    return await fn();
  } finally {
    await release();
  }
}
