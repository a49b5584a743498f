// Which upgrades kctl takes: the version skew rules, checked before a plan is written and again
// by each member before it swaps its executable. Kubernetes supports one minor version step at a
// time for the control plane (kube-apiserver instances may differ by one minor while they roll),
// kubelet no newer than kube-apiserver, and no downgrade; etcd likewise moves one minor at a time
// and never back. kctl keeps the order by construction: controllers first, each starting its new
// etcd before its new kube-apiserver, and nodes only once every controller runs the target.
import { compareVersions, parseVersion, type Release } from '../base/version.ts';

/** [major, minor] of a version, or undefined if it is not one. */
function majorMinor(v: string): [number, number] | undefined {
  try {
    const [major, minor] = parseVersion(v).core as [number, number];
    return [major, minor];
  } catch {
    return undefined;
  }
}

/** Why `from` -> `to` is not one allowed step of a component, or undefined. */
function stepProblem(component: string, from: string, to: string): string | undefined {
  const [x, y] = [majorMinor(from), majorMinor(to)];
  if (!x || !y) return `${component} version "${x ? to : from}" is not a version`;
  if (compareVersions(to, from) < 0) return `${component} ${to} is older than the running ${from} (no downgrades)`;
  if (y[0] !== x[0]) return `${component} ${from} -> ${to} changes the major version`;
  if (y[1] - x[1] > 1)
    return `${component} ${from} -> ${to} skips minor version ${x[0]}.${x[1] + 1} (upgrade to a ${x[0]}.${x[1] + 1} release first)`;
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
    const problem =
      kctl ?? stepProblem('Kubernetes', m.kubernetes, target.kubernetes) ?? stepProblem('etcd', m.etcd, target.etcd);
    if (problem) return kctl ? problem : `${m.name}: ${problem}`;
  }
  return undefined;
}
