// Which upgrades kctl takes: the version skew rules, checked before a plan is written and again
// by each member before it swaps its executable. Kubernetes supports one minor version step at a
// time for the control plane (kube-apiserver instances may differ by one minor while they roll),
// kubelet no newer than kube-apiserver, and no downgrade; etcd likewise moves one minor at a time
// and never back. kctl keeps the order by construction: controllers first, each starting its new
// etcd before its new kube-apiserver, and nodes only once every controller runs the target.
import type { Release } from './upgrade-plan.ts';

export interface SemVer {
  major: number;
  minor: number;
  patch: number;
  /** Pre-release identifiers ('' when none). */
  pre: string;
}

/** A semantic version, with or without a leading v; undefined if it is not one. */
export function parseSemVer(s: string): SemVer | undefined {
  const m = /^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$/.exec(s.trim());
  if (!m) return undefined;
  return { major: Number(m[1]), minor: Number(m[2]), patch: Number(m[3]), pre: m[4] ?? '' };
}

function comparePre(a: string, b: string): number {
  if (a === b) return 0;
  if (a === '') return 1; // a release sorts after its pre-releases
  if (b === '') return -1;
  const x = a.split('.');
  const y = b.split('.');
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    if (x[i] === undefined) return -1;
    if (y[i] === undefined) return 1;
    const [nx, ny] = [/^\d+$/.test(x[i]!), /^\d+$/.test(y[i]!)];
    if (nx && ny && Number(x[i]) !== Number(y[i])) return Number(x[i]) - Number(y[i]);
    if (nx !== ny) return nx ? -1 : 1;
    if (!nx && x[i] !== y[i]) return x[i]! < y[i]! ? -1 : 1;
  }
  return 0;
}

/** <0, 0, >0 as a sorts before, with or after b (semver precedence). Throws on a string that is not a version. */
export function compareVersions(a: string, b: string): number {
  const [x, y] = [parseSemVer(a), parseSemVer(b)];
  if (!x || !y) throw new Error(`"${x ? b : a}" is not a version (expected MAJOR.MINOR.PATCH)`);
  return x.major - y.major || x.minor - y.minor || x.patch - y.patch || comparePre(x.pre, y.pre);
}

/** Why `from` -> `to` is not one allowed step of a component, or undefined. */
function stepProblem(component: string, from: string, to: string): string | undefined {
  const [x, y] = [parseSemVer(from), parseSemVer(to)];
  if (!x || !y) return `${component} version "${x ? to : from}" is not a version`;
  if (compareVersions(to, from) < 0) return `${component} ${to} is older than the running ${from} (no downgrades)`;
  if (y.major !== x.major) return `${component} ${from} -> ${to} changes the major version`;
  if (y.minor - x.minor > 1)
    return `${component} ${from} -> ${to} skips minor version ${x.major}.${x.minor + 1} (upgrade to a ${x.major}.${x.minor + 1} release first)`;
  return undefined;
}

/**
 * Why the cluster's members (each the release it runs) cannot move to `target`, or undefined.
 * A member that already runs the target is fine; nothing may go back.
 */
export function skewProblem(running: Iterable<Release & { name: string }>, target: Release): string | undefined {
  for (const m of running) {
    const kctl =
      compareVersions(target.version, m.version) < 0
        ? `kctl ${target.version} is older than ${m.version}, which ${m.name} runs (no downgrades)`
        : undefined;
    const problem = kctl ?? stepProblem('Kubernetes', m.kubernetes, target.kubernetes) ?? stepProblem('etcd', m.etcd, target.etcd);
    if (problem) return kctl ? problem : `${m.name}: ${problem}`;
  }
  return undefined;
}
