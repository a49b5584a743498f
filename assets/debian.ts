// Debian packages the build and the test lab need; installed once, only when missing. And single
// .debs of another suite, pinned, for images whose host package is too old.
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { execa } from 'execa';
import { messageOf } from '../src/base/errors.ts';
import { cacheRoot } from '../src/payload/manifest.ts';
import { sha256 } from '../src/payload/oci.ts';

async function installed(pkg: string): Promise<boolean> {
  const r = await execa('dpkg-query', ['-W', '-f=${Status}', pkg], { reject: false });
  return r.stdout.includes('install ok installed');
}

export async function ensureDebianPackages(pkgs: string[]): Promise<void> {
  const missing: string[] = [];
  for (const p of pkgs) if (!(await installed(p))) missing.push(p);
  if (missing.length === 0) return;
  // Progress goes to stderr, apt-get's too: a command that prints JSON (bench --json) keeps stdout clean.
  process.stderr.write(`installing Debian packages: ${missing.join(' ')}\n`);
  const env = { DEBIAN_FRONTEND: 'noninteractive' };
  await execa('apt-get', ['update', '-qq'], { env, stdin: 'ignore', stdout: 2, stderr: 'inherit' });
  await execa('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...missing], {
    env,
    stdin: 'ignore',
    stdout: 2,
    stderr: 'inherit',
  });
}

/** One .deb (or source tarball) from a Debian suite other than the host's, pinned by its pool path and sha256 (from the suite's Packages or Sources index). */
export interface DebianDeb {
  package: string;
  version: string;
  /** Where the suite's Packages index puts it, e.g. pool/main/b/busybox/busybox-static_1.37.0-6+b9_amd64.deb. */
  file: string;
  sha256: string;
  /** For the error that tells how to renew the pin. */
  suite: string;
}

/** The Debian mirror .debs and image bases come from: the machine's own is deb.debian.org; KCTL_DEBIAN_MIRROR moves it. */
export const DEBIAN_MIRROR = process.env.KCTL_DEBIAN_MIRROR ?? 'http://deb.debian.org/debian';

/**
 * The pinned .deb's path in the cache (<cacheRoot()>/debs), downloaded once. The pin's sha256 is
 * the trust: a mirror over plain HTTP cannot hand over other bytes. Debian keeps only a suite's
 * current versions in its pool, so a pin can go stale; the error says how to renew it.
 */
export async function debianDeb(deb: DebianDeb): Promise<string> {
  const dir = join(cacheRoot(), 'debs');
  const target = join(dir, basename(deb.file));
  if (existsSync(target) && sha256(await readFile(target)) === deb.sha256) return target;
  const url = `${DEBIAN_MIRROR}/${deb.file}`;
  process.stderr.write(`downloading ${deb.package} ${deb.version} (Debian ${deb.suite})\n`);
  const res = await fetch(url).catch((err: unknown) => {
    throw new Error(`cannot download ${url}: ${messageOf(err)}; is the Debian mirror reachable?`, { cause: err });
  });
  const index = deb.file.endsWith('.deb')
    ? 'main/binary-amd64/Packages.xz (Version, Filename, SHA256)'
    : 'main/source/Sources.xz (Version, Directory, Checksums-Sha256)';
  const renew = `renew the pin from ${DEBIAN_MIRROR}/dists/${deb.suite}/${index}`;
  if (!res.ok)
    throw new Error(`cannot download ${deb.package} ${deb.version} from ${url}: HTTP ${res.status}; ${renew}`);
  const bytes = Buffer.from(await res.arrayBuffer());
  const got = sha256(bytes);
  if (got !== deb.sha256)
    throw new Error(`${url} has sha256 ${got}, the pin says ${deb.sha256}; nothing was kept; ${renew}`);
  await mkdir(dir, { recursive: true });
  await writeFile(`${target}.tmp`, bytes);
  await rename(`${target}.tmp`, target);
  return target;
}
