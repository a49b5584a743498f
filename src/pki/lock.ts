// One lock on the PKI directory: a starting controller, the renewer and a CA rotation step never
// write its files at the same time (proper-lockfile: the lock goes stale if its holder dies).
import { withDirLock } from '../base/fs.ts';

export function withPkiLock<T>(dir: string, fn: () => Promise<T>): Promise<T> {
  return withDirLock(dir, '.pki.lock', fn);
}
