// The controller's side of the pod network mode (kube/pod-network.ts): at every start it writes
// the mode nodes follow. An unset spec.network.mode keeps what the cluster runs; a cluster made by
// a kctl from before modes (cluster-info exists, the ConfigMap does not) runs routes, so an
// upgrade never moves its pods onto another network.
import type { KubeClient } from '../../kube/client.ts';
import type { Logger } from '../../base/log.ts';
import {
  LEGACY_POD_NETWORK,
  parsePodNetwork,
  podNetworkConfigMap,
  POD_NETWORK_PATH,
  type NetworkMode,
  type PodNetwork,
} from '../../kube/pod-network.ts';
import { messageOf } from '../../base/errors.ts';
import type { ClusterConfig } from '../config/config.ts';
import { nodePodRangeBits } from '../components/controller-manager.ts';
import { CLUSTER_INFO_PATH } from '../../kube/cluster-info.ts';

/** The mode of a new cluster whose config does not name one. */
export const DEFAULT_NETWORK_MODE: NetworkMode = 'routes';

/** What the cluster runs now: its ConfigMap, or undefined with the reason it could not be read. */
async function recordedPodNetwork(
  kube: KubeClient,
  signal?: AbortSignal,
): Promise<{ recorded?: PodNetwork; exists: boolean; unreadable?: string }> {
  const cm = await kube.find<{ data?: Record<string, string> }>(POD_NETWORK_PATH, signal);
  if (!cm) return { exists: false };
  try {
    return { recorded: parsePodNetwork(cm.data), exists: true };
  } catch (err) {
    return { exists: true, unreadable: messageOf(err) };
  }
}

/** A cluster made before this controller's start (by any kctl) has cluster-info. */
async function clusterExists(kube: KubeClient, signal?: AbortSignal): Promise<boolean> {
  return (await kube.find(CLUSTER_INFO_PATH, signal)) !== undefined;
}

/** Writes the pod network nodes follow and returns it; runs before cluster-info is written on a new cluster. */
export async function publishPodNetwork(
  kube: KubeClient,
  cfg: ClusterConfig,
  log: Logger,
  signal?: AbortSignal,
): Promise<PodNetwork> {
  const { recorded, exists, unreadable } = await recordedPodNetwork(kube, signal);
  let mode = cfg.spec.network.mode ?? recorded?.mode;
  if (!mode && !exists) mode = (await clusterExists(kube, signal)) ? LEGACY_POD_NETWORK.mode : DEFAULT_NETWORK_MODE;
  const n = cfg.spec.network;
  // A cluster that ran without policies (an older kctl) keeps ignoring them until told otherwise:
  // an upgrade must not start dropping traffic that policies written for elsewhere would block.
  const policy = n.policy ?? recorded?.policy ?? !(exists || (await clusterExists(kube, signal)));
  const want: PodNetwork = {
    mode: mode ?? DEFAULT_NETWORK_MODE,
    relay: n.relay,
    policy,
    vxlan: { ...n.vxlan },
    wireguard: { ...n.wireguard },
    ranges: { clusterCIDR: n.podCIDR, nodeBits: nodePodRangeBits(cfg), serviceCIDR: n.serviceCIDR },
  };
  if (unreadable) log.warn(`${unreadable}; writing mode ${want.mode} from this controller's config`);
  if (recorded && JSON.stringify(recorded) === JSON.stringify(want)) return want;
  await kube.apply(podNetworkConfigMap(want), { fieldManager: 'kctl', force: true }, signal);
  if (recorded && recorded.policy !== want.policy)
    log.warn(
      { policy: want.policy },
      `NetworkPolicy enforcement switched ${want.policy ? 'on' : 'off'}; nodes follow it live`,
    );
  if (recorded && recorded.mode !== want.mode)
    log.warn(
      { was: recorded.mode, now: want.mode },
      `pod network mode switched from ${recorded.mode} to ${want.mode}; nodes follow it live`,
    );
  else log.info({ ...want }, 'pod network published for the nodes');
  return want;
}
