// kctl's own version: injected by the bundler into dist/kctl, read from package.json in a checkout.
import { readFileSync } from 'node:fs';
import { UserError } from './errors.ts';

declare const __KCTL_VERSION__: string | undefined;
/** True only in the test build dist/kctl-broken (assets/build-test-kctls.ts); false in every other build. */
declare const __KCTL_CANNOT_START__: boolean | undefined;

export const KCTL_VERSION: string =
  typeof __KCTL_VERSION__ === 'string'
    ? __KCTL_VERSION__
    : (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/** What one kctl executable is: its own version and the versions of what it carries. */
export interface Release {
  /** kctl's version (semver). */
  version: string;
  /** Kubernetes version of its components, e.g. v1.36.3. */
  kubernetes: string;
  /** etcd version it carries, e.g. v3.6.14. */
  etcd: string;
}

/**
 * The controller and worker of a build made to fail call this once their config is read and
 * before they touch anything, so an upgrade to that build has to roll back. Only a build-time
 * constant sets it: no flag or variable makes a real build refuse to start.
 */
export function refuseTestBuildStart(): void {
  if (typeof __KCTL_CANNOT_START__ === 'boolean' && __KCTL_CANNOT_START__)
    throw new UserError(
      `this is a test build that cannot start (kctl ${KCTL_VERSION}, made to test upgrade rollbacks); run a release build of kctl`,
    );
}

/**
 * Semantic-version precedence (semver.org, item 11): negative when `a` comes before `b`. A
 * pre-release comes before its release (0.1.0-prev.1 < 0.1.0 < 0.1.1-broken); build metadata
 * (+...) does not count. Throws on a string that is not MAJOR.MINOR.PATCH[-PRE][+BUILD].
 */
export function compareVersions(a: string, b: string): number {
  const [pa, pb] = [parseVersion(a), parseVersion(b)];
  for (let i = 0; i < 3; i++) if (pa.core[i] !== pb.core[i]) return pa.core[i]! - pb.core[i]!;
  if (!pa.pre.length || !pb.pre.length) return pb.pre.length - pa.pre.length;
  for (let i = 0; i < Math.min(pa.pre.length, pb.pre.length); i++) {
    const order = compareIdentifiers(pa.pre[i]!, pb.pre[i]!);
    if (order) return order;
  }
  return pa.pre.length - pb.pre.length;
}

/** Whether a member that says it runs `version` runs one before `since`; one that says nothing, or no version, does. */
export function runsBefore(version: string | undefined, since: string): boolean {
  try {
    return version === undefined || compareVersions(version, since) < 0;
  } catch {
    return true;
  }
}

/** MAJOR.MINOR.PATCH and the pre-release identifiers of a version (a leading v allowed); throws on anything else. */
export function parseVersion(v: string): { core: number[]; pre: string[] } {
  const m = /^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$/.exec(v);
  if (!m) throw new UserError(`"${v}" is not a version (MAJOR.MINOR.PATCH, optionally -PRERELEASE)`);
  return { core: [Number(m[1]), Number(m[2]), Number(m[3])], pre: m[4]?.split('.') ?? [] };
}

/** Numeric identifiers compare as numbers and before alphanumeric ones, which compare in ASCII order. */
function compareIdentifiers(x: string, y: string): number {
  const [nx, ny] = [/^\d+$/.test(x), /^\d+$/.test(y)];
  if (nx && ny) return Number(x) - Number(y);
  if (nx !== ny) return nx ? -1 : 1;
  return x < y ? -1 : x > y ? 1 : 0;
}
