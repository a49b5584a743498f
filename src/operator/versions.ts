// Which kctl version a KctlCluster's control plane may roll to: kctl's upgrade rules
// (kube/version-skew.ts), as `kctl upgrade plan` checks them on a controller host. Never back, and
// one Kubernetes minor version at a time. The operator knows which Kubernetes a kctl version
// carries only for its own version (its payload), so a roll to that version is checked against the
// Kubernetes the control plane runs now; a roll to another version is not (the operator cannot look
// into that image), and the Progressing message says so.
import { compareVersions, parseVersion, type Release } from '../base/version.ts';
import { skewProblem } from '../kube/version-skew.ts';

/** What the cluster's status says its control plane runs (both written once every pod ran them). */
export interface RunningVersions {
  version?: string;
  kubernetesVersion?: string;
}

/** Why the control plane may not roll to `target`, with the condition's reason; undefined if it may. */
export function rollProblem(
  target: string,
  running: RunningVersions,
  own: Release,
): { reason: string; message: string } | undefined {
  const from = running.version;
  if (!from || from === target) return undefined;
  if (compareVersions(target, from) < 0)
    return {
      reason: 'DowngradeRefused',
      message: `kctl ${target} is older than the ${from} its control plane runs (no downgrades); set spec.version to ${from} or newer`,
    };
  if (own.version !== target || !running.kubernetesVersion) return undefined;
  const problem = skewProblem(
    // Hosted control planes keep their data in kine: there is no etcd to step.
    [{ name: 'its control plane', version: from, kubernetes: running.kubernetesVersion, etcd: own.etcd }],
    own,
  );
  return problem
    ? {
        reason: 'VersionSkewRefused',
        message: `cannot roll to kctl ${target} (Kubernetes ${own.kubernetes}): ${problem}`,
      }
    : undefined;
}

/** The Progressing message of a roll under way, which says when its Kubernetes step went unchecked. */
export const rolling = (target: string, own: Release): string =>
  own.version === target
    ? `rolling to kctl ${target}`
    : `rolling to kctl ${target} (its Kubernetes step not checked: this operator knows the Kubernetes of kctl ${own.version} only)`;

/** "1.36.3" from kube-apiserver's /version gitVersion ("v1.36.3"); undefined if it is not one. */
export function kubernetesOfGitVersion(gitVersion: unknown): string | undefined {
  try {
    return typeof gitVersion === 'string' ? parseVersion(gitVersion).core.join('.') : undefined;
  } catch {
    return undefined;
  }
}
