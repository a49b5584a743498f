// The files every controller of a cluster shares (SHARED_PKI_FILES: CAs, service-account and
// encryption keys), kept outside the data dir. A control plane run as a pod has a data dir that
// dies with the pod: `kctl controller --shared-pki DIR` takes them from DIR (a mounted Secret,
// flat names: etcd/ca.crt is etcd-ca.crt), so the next pod is the same cluster, with the same CA.
// kctl makes none of them then, and a data dir that holds other ones is refused: trust anchors
// change only by a CA rotation, never because a file elsewhere says so. `kctl pki save-shared`
// writes them out of a data dir, for such a Secret.
import { existsSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { UserError } from '../../base/errors.ts';
import { writeFileAtomic } from '../../base/fs.ts';
import type { Logger } from '../../base/log.ts';
import {
  SHARED_PKI_FILES,
  sharedPkiFilesFor,
  sharedPkiMode,
  sharedPkiName,
  type SharedPkiFile,
} from '../../pki/paths.ts';

/**
 * Puts the shared files from `from` into `pkiDir`: every one in `required` (what this control
 * plane has: sharedPkiFilesFor) must be in `from`, and the others there are taken too; one already
 * in `pkiDir` must be the same bytes. Checks all before writing any, so a refusal writes nothing.
 */
export async function adoptSharedPki(
  from: string,
  pkiDir: string,
  required: readonly SharedPkiFile[],
  log: Logger,
): Promise<void> {
  const missing = required.filter((f) => !existsSync(join(from, sharedPkiName(f))));
  if (missing.length)
    throw new UserError(
      `--shared-pki ${from} lacks ${missing.map(sharedPkiName).join(', ')}; write the whole set with kctl pki save-shared from the cluster's data dir`,
    );
  const files = new Map<SharedPkiFile, Buffer>();
  const differ: string[] = [];
  for (const f of SHARED_PKI_FILES.filter((f) => existsSync(join(from, sharedPkiName(f))))) {
    const data = await readFile(join(from, sharedPkiName(f)));
    const here = join(pkiDir, f);
    if (existsSync(here) && !(await readFile(here)).equals(data)) differ.push(f);
    files.set(f, data);
  }
  if (differ.length)
    throw new UserError(
      `${pkiDir} holds other ${differ.join(', ')} than --shared-pki ${from}: they belong to another cluster or a CA rotation since; start with an empty data dir, or put this data dir's files in ${from}`,
    );
  for (const [f, data] of files) {
    await mkdir(dirname(join(pkiDir, f)), { recursive: true, mode: 0o755 });
    await writeFileAtomic(join(pkiDir, f), data, sharedPkiMode(f));
  }
  log.info({ from }, 'took the cluster CAs and keys from --shared-pki');
}

/**
 * Writes the shared files `pkiDir` has into `to` (flat names, keys 0600; those of every control
 * plane must be there); returns the names written.
 */
export async function saveSharedPki(pkiDir: string, to: string): Promise<string[]> {
  const missing = sharedPkiFilesFor({ etcd: false }).filter((f) => !existsSync(join(pkiDir, f)));
  if (missing.length)
    throw new UserError(
      `${pkiDir} has no ${missing.join(', ')}; run kctl controller (or --init-only) with this data dir first`,
    );
  await mkdir(to, { recursive: true, mode: 0o700 });
  const present = SHARED_PKI_FILES.filter((f) => existsSync(join(pkiDir, f)));
  for (const f of present)
    await writeFileAtomic(join(to, sharedPkiName(f)), await readFile(join(pkiDir, f)), sharedPkiMode(f));
  return present.map(sharedPkiName);
}
