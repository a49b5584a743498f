// The ports a controller listens on, named by what listens there: kctl sysinfo checks they are
// free before a start, and the status reports them.
import type { ClusterConfig } from '../config/config.ts';
import { KUBE_APISERVER } from './apiserver.ts';
import { KUBE_CONTROLLER_MANAGER } from './controller-manager.ts';
import { KUBE_SCHEDULER } from './scheduler.ts';

/** The ports a controller listens on, by what uses them (kctl sysinfo checks they are free). */
export function controllerPorts(cfg: ClusterConfig): Record<string, number> {
  const s = cfg.spec;
  const etcd: Record<string, number> =
    s.storage.type === 'etcd'
      ? { 'etcd client port': s.storage.etcd.clientPort, 'etcd peer port': s.storage.etcd.peerPort }
      : {};
  if (s.profile === 'api-only')
    return { [KUBE_APISERVER]: s.api.port, ...etcd, [KUBE_CONTROLLER_MANAGER]: s.controllerManager.port };
  return {
    [KUBE_APISERVER]: s.api.port,
    'controller join endpoint': s.api.joinPort,
    'konnectivity agent port': s.konnectivity.agentPort,
    'konnectivity admin port': s.konnectivity.adminPort,
    ...etcd,
    [KUBE_SCHEDULER]: s.scheduler.port,
    [KUBE_CONTROLLER_MANAGER]: s.controllerManager.port,
  };
}
