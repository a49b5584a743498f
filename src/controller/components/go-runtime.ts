// The Go runtime's settings for the components kctl runs (spec.gcPercent, each component's
// memoryLimit): GOGC and GOMEMLIMIT in the child's environment.
import type { ClusterConfig } from '../config/config.ts';

/** GOMEMLIMIT for a Go component, when the config sets one. */
function goMemoryLimit(limit: string | undefined): Record<string, string> {
  return limit ? { GOMEMLIMIT: limit } : {};
}

/**
 * The Go runtime's environment for a control-plane component (kube-apiserver, the datastore,
 * kube-scheduler, kube-controller-manager): GOGC, and GOMEMLIMIT when given.
 */
export function goRuntimeEnv(cfg: ClusterConfig, memoryLimit?: string): Record<string, string> {
  return {
    ...(cfg.spec.gcPercent === undefined ? {} : { GOGC: String(cfg.spec.gcPercent) }),
    ...goMemoryLimit(memoryLimit),
  };
}
