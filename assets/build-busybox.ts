// busybox for the busybox images, built from busybox's own release source as upstream's images
// are: `make defconfig` and a static link. Debian's busybox-static will not do: Debian reverts
// upstream's ash change that passes environment variables whose names are not shell identifiers
// (`data-1`, `1-x`) on to the programs it runs, and Kubernetes lets a pod have such names (its
// conformance specs check that `sh -c env` prints them). The source is the release tarball as
// Debian's source pool keeps it (the orig tarball is busybox's own), pinned by sha256.
// Cached in <cacheRoot()>/busybox/<key>/busybox.
//
//   tsx assets/build-busybox.ts     prints the binary's path
import { existsSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { messageOf } from '../src/base/errors.ts';
import { cacheRoot } from '../src/payload/manifest.ts';
import { sha256 } from '../src/payload/oci.ts';
import { withDirLock } from './build-components.ts';
import { debianDeb, ensureDebianPackages, type DebianDeb } from './debian.ts';

export const BUSYBOX_VERSION = '1.37.0';
/** busybox's release tarball, from Debian trixie's Sources index (busybox_1.37.0.orig.tar.bz2). */
const BUSYBOX_SOURCE: DebianDeb = {
  package: 'busybox (source)',
  version: BUSYBOX_VERSION,
  suite: 'trixie',
  file: `pool/main/b/busybox/busybox_${BUSYBOX_VERSION}.orig.tar.bz2`,
  sha256: '3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4',
};
/** What is set on top of defconfig: one static executable with every applet. */
const CONFIG = { CONFIG_STATIC: 'y' };
/** Bump when the build's output changes for the same inputs. */
const BUILD_VERSION = '1';

/** The path of the static busybox, built once per inputs. */
export async function buildBusybox(): Promise<string> {
  await ensureDebianPackages(['gcc', 'libc6-dev', 'make', 'bzip2']);
  const gcc = (await execa('gcc', ['--version'])).stdout.split('\n')[0] ?? '';
  const key = sha256(`${BUILD_VERSION}\n${BUSYBOX_SOURCE.sha256}\n${JSON.stringify(CONFIG)}\n${gcc}`).slice(0, 16);
  const dir = join(cacheRoot(), 'busybox', key);
  const out = join(dir, 'busybox');
  if (existsSync(out)) return out;
  return withDirLock(dir, 'busybox', 600, async () => {
    if (existsSync(out)) return out;
    const tarball = await debianDeb(BUSYBOX_SOURCE);
    const work = await mkdtemp(join(tmpdir(), 'kctl-busybox-src-'));
    try {
      process.stderr.write(`busybox ${BUSYBOX_VERSION}: building from source (a few minutes, once)\n`);
      await execa('tar', ['-xjf', tarball, '-C', work]);
      const src = join(work, `busybox-${BUSYBOX_VERSION}`);
      // The build date in busybox's banner is the source's, so the same inputs give the same bytes.
      const env = { KCONFIG_NOTIMESTAMP: '1', SOURCE_DATE_EPOCH: '0', LC_ALL: 'C' };
      await execa('make', ['defconfig'], { cwd: src, env });
      const config = join(src, '.config');
      let text = await readFile(config, 'utf8');
      for (const [k, v] of Object.entries(CONFIG)) {
        const line = new RegExp(`^(# )?${k}(=.*| is not set)$`, 'm');
        if (!line.test(text)) throw new Error(`busybox ${BUSYBOX_VERSION}'s defconfig has no ${k}`);
        text = text.replace(line, `${k}=${v}`);
      }
      await writeFile(config, text);
      await execa('make', ['oldconfig'], { cwd: src, env, input: '\n'.repeat(200) });
      const r = await execa('make', [`-j${availableParallelism()}`, 'busybox'], {
        cwd: src,
        env,
        reject: false,
        all: true,
      });
      if (r.exitCode !== 0)
        throw new Error(
          `busybox ${BUSYBOX_VERSION} did not build:\n${String(r.all).split('\n').slice(-20).join('\n')}`,
        );
      await mkdir(dir, { recursive: true });
      await copyFile(join(src, 'busybox'), `${out}.tmp`);
      await rename(`${out}.tmp`, out);
      return out;
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  });
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  try {
    process.stdout.write(`${await buildBusybox()}\n`);
  } catch (err) {
    process.stderr.write(`busybox build: ${messageOf(err)}\n`);
    process.exit(1);
  }
}
