// The controller's side of worker profiles (kube/worker-profiles.ts): at every start it writes
// spec.workerProfiles for the nodes, so a changed or removed profile reaches them live. Every
// controller of a cluster writes its own config's: set the same profiles on each.
import type { KubeClient } from '../../kube/client.ts';
import type { Logger } from '../../base/log.ts';
import { WORKER_PROFILES_PATH, workerProfilesConfigMap } from '../../kube/worker-profiles.ts';
import type { ClusterConfig } from '../config/config.ts';

export async function publishWorkerProfiles(
  kube: KubeClient,
  cfg: ClusterConfig,
  log: Logger,
  signal?: AbortSignal,
): Promise<void> {
  const want = workerProfilesConfigMap(
    Object.fromEntries(cfg.spec.workerProfiles.map((p) => [p.name, p.values as Record<string, unknown>])),
  );
  const had = await kube.find<{ data?: Record<string, string> }>(WORKER_PROFILES_PATH, signal);
  if (had && JSON.stringify(had.data ?? {}) === JSON.stringify(want.data)) return;
  await kube.apply(want, { fieldManager: 'kctl', force: true }, signal);
  log.info({ profiles: Object.keys(want.data) }, 'worker profiles published for the nodes');
}
