// The two kctl executables the upgrade tests run beside dist/kctl, made from the same code by
// build-test-kctls.ts (npm test builds them after dist/kctl):
//   dist/kctl-previous  an older kctl: version <package.json>-prev.1 (a semver pre-release, so it
//                       sorts before package.json's version), carrying the previous Kubernetes patch
//                       release; every other component is dist/kctl's
//   dist/kctl-broken    a newer kctl (next patch, -broken) with dist/kctl's payload, whose controller
//                       and worker refuse to start: an upgrade to it must roll back
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const version = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version;

/**
 * The Kubernetes release before the pinned one (assets/components.json has v1.36.3): the previous
 * patch release that the Go module proxy serves (v1.36.2 is not), staging modules k8s.io/* v0.36.1.
 */
export const PREVIOUS_KUBERNETES = 'v1.36.1';

export interface TestKctl {
  /** Path of the executable. */
  path: string;
  /** What its `kctl version` reports. */
  version: string;
  /** The Kubernetes version its components are built from, when not assets/components.json's. */
  kubernetes?: string;
  /** Its controller and worker exit at start with "this is a test build that cannot start". */
  cannotStart?: boolean;
}

/** `0.1.0` → `0.1.1`: a version above `v` whatever pre-release follows it. */
function nextPatch(v: string): string {
  const m = /^(\d+)\.(\d+)\.(\d+)$/.exec(v);
  if (!m)
    throw new Error(
      `package.json's version ${v} is not MAJOR.MINOR.PATCH; the test builds' versions are derived from it`,
    );
  return `${m[1]}.${m[2]}.${Number(m[3]) + 1}`;
}

export const PREVIOUS_KCTL: TestKctl = {
  path: join(root, 'dist/kctl-previous'),
  version: `${version}-prev.1`,
  kubernetes: PREVIOUS_KUBERNETES,
};

export const BROKEN_KCTL: TestKctl = {
  path: join(root, 'dist/kctl-broken'),
  version: `${nextPatch(version)}-broken`,
  cannotStart: true,
};

export const TEST_KCTLS: readonly TestKctl[] = [PREVIOUS_KCTL, BROKEN_KCTL];
