// Running the built executables in end-to-end tests: dist/kctl, and the test builds beside it
// (assets/test-kctls.ts: an older kctl with the previous Kubernetes release, one that cannot start).
import { execa, type Options, type Result } from 'execa';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { copyFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BROKEN_KCTL, PREVIOUS_KCTL, type TestKctl } from '../../../assets/test-kctls.ts';

export const root = new URL('../../..', import.meta.url).pathname;
export const KCTL = process.env.KCTL_BIN ?? join(root, 'dist/kctl');

export function requireKctl(): string {
  if (!existsSync(KCTL)) throw new Error(`${KCTL} is missing; run npm run build (npm test does it first)`);
  return KCTL;
}

function requireTestKctl(t: TestKctl): TestKctl {
  if (!existsSync(t.path))
    throw new Error(`${t.path} is missing; run npm run build, then npm run test-builds (npm test does both first)`);
  return t;
}

/** dist/kctl-previous: its path, the version it reports, the Kubernetes version it carries. */
export function requirePreviousKctl(): TestKctl {
  return requireTestKctl(PREVIOUS_KCTL);
}

/** dist/kctl-broken: its path and version; its controller and worker exit at start. */
export function requireBrokenKctl(): TestKctl {
  return requireTestKctl(BROKEN_KCTL);
}

let ownState: string[] = [];

/**
 * Makes a host state dir of this test file's own (kctl --host-state-dir, where named control
 * planes claim their ports host-wide). A removed tenant's claims stand for a grace period, so with
 * the host's shared dir one file's removed tenants could fill the next file's port range. Call it
 * once at the top of a file that starts tenants, and pass hostStateArgs() to every kctl that
 * starts, resets or installs one.
 */
export function ownHostState(): string {
  const dir = mkdtempSync(join(tmpdir(), 'kctl-host-state-'));
  ownState = ['--host-state-dir', dir];
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** `--host-state-dir DIR` of this file's own host state dir; nothing before ownHostState(). */
export function hostStateArgs(): string[] {
  return ownState;
}

export function kctl(args: string[], opts: Options = {}): Promise<Result> {
  return execa(requireKctl(), args, { reject: false, all: false, timeout: 300_000, ...opts }) as Promise<Result>;
}

/** Copies `source` to `<dir>/<name>-bin/kctl`: each host runs its own file, as an installed kctl would (an upgrade replaces it). */
export async function ownCopy(dir: string, name: string, source: string): Promise<string> {
  const bin = join(dir, `${name}-bin`, 'kctl');
  await mkdir(join(dir, `${name}-bin`));
  await copyFile(source, bin);
  return bin;
}
