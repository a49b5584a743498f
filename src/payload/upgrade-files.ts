// What an upgrade keeps under a data dir, the same for a controller and a node: <data-dir>/upgrade/
// holds kctl executables of other versions (a plan's target, fetched or given to `kctl upgrade
// plan`, and the previous one, kept for a rollback), and outcome.json, which a rollback writes
// before the previous executable starts again so that it can report why.
import { execa } from 'execa';
import { readFile, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { FrontDoorEndpoint } from '../base/addresses.ts';
import { messageOf, UserError } from '../base/errors.ts';
import { writeFileAtomic } from '../base/fs.ts';
import { parseVersion, type Release } from '../base/version.ts';
import { installExecutable } from '../supervisor/handover.ts';
import type { DownloadSource } from './download.ts';

/** Where a controller's join endpoint serves executables (controller/upgrades/executables.ts). */
export const EXECUTABLES_PATH = '/v1/executables/';

/** The URL of `version`'s executable at a controller whose executables base URL is `base` (its Lease says). */
export const executableUrl = (base: string, version: string): string =>
  `${base}${EXECUTABLES_PATH}${encodeURIComponent(version)}`;

/**
 * Where a member downloads kctl `version` from a controller (as its lease says): its host's front
 * door by the join endpoint's name, else its join endpoint.
 */
export function executableSource(
  c: { frontDoor?: Pick<FrontDoorEndpoint, 'address' | 'join'>; executables?: string },
  version: string,
): DownloadSource | undefined {
  if (c.frontDoor)
    return { url: executableUrl(`https://${c.frontDoor.address}`, version), serverName: c.frontDoor.join };
  return c.executables ? { url: executableUrl(c.executables, version) } : undefined;
}

/** Under the data dir: executables of other versions, and the last rollback's outcome. */
export const UPGRADE_DIR = 'upgrade';

export const keptExecutable = (dataDir: string, version: string): string =>
  join(dataDir, UPGRADE_DIR, `kctl-${version}`);

/** What a rollback leaves for the previous executable to report. */
export interface UpgradeOutcome {
  target: string;
  state: 'rolled back' | 'failed';
  reason: string;
  at: string;
}

export const outcomeFile = (dataDir: string): string => join(dataDir, UPGRADE_DIR, 'outcome.json');

export async function writeOutcome(dataDir: string, o: UpgradeOutcome): Promise<void> {
  await writeFileAtomic(outcomeFile(dataDir), JSON.stringify(o) + '\n', 0o644);
}

export async function readOutcome(dataDir: string): Promise<UpgradeOutcome | undefined> {
  const text = await readFile(outcomeFile(dataDir), 'utf8').catch(() => undefined);
  try {
    return text ? (JSON.parse(text) as UpgradeOutcome) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Before a restart into another version: keeps `installed` (the executable running now, at
 * `version`) under the data dir for a rollback, unless a copy is there already, and clears the
 * last outcome. Returns the kept copy's path.
 */
export async function keepForRollback(dataDir: string, installed: string, version: string): Promise<string> {
  const previous = keptExecutable(dataDir, version);
  if (!(await stat(previous).catch(() => null))) await installExecutable(installed, previous);
  await rm(outcomeFile(dataDir), { force: true });
  return previous;
}

/** The release a kctl executable carries, from its own `version -o json`. */
export async function releaseOfExecutable(file: string): Promise<Release> {
  const out = await execa(file, ['version', '-o', 'json'], { timeout: 120_000, reject: false });
  if (out.exitCode !== 0)
    throw new UserError(
      `${file} is not a kctl executable that runs here: \`version -o json\` failed (${String(out.stderr || out.stdout).split('\n')[0] || (out.exitCode === undefined ? out.shortMessage : `exit ${out.exitCode}`)})`,
    );
  try {
    const v = JSON.parse(out.stdout) as { kctl?: string; components?: Record<string, { version?: string }> };
    const kubernetes = v.components?.['kube-apiserver']?.version;
    const etcd = v.components?.etcd?.version;
    if (!v.kctl || !kubernetes || !etcd) throw new Error('no kctl, kube-apiserver or etcd version');
    parseVersion(v.kctl);
    return { version: v.kctl, kubernetes, etcd };
  } catch (err) {
    throw new UserError(`${file} did not describe itself as a kctl executable (${messageOf(err)})`);
  }
}

/** Why `described` is not the plan's `target`, or undefined when it is. */
export function describedProblem(described: Release, target: Release): string | undefined {
  return described.version !== target.version ||
    described.kubernetes !== target.kubernetes ||
    described.etcd !== target.etcd
    ? `the target executable describes itself as kctl ${described.version} (Kubernetes ${described.kubernetes}, etcd ${described.etcd}), not as the plan says`
    : undefined;
}
