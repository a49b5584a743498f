// How the cluster's pod network carries traffic between nodes, as the controllers publish it for
// the workers: one ConfigMap, kube-system/kctl-pod-network, which nodes may read (an RBAC rule
// naming this one object) and not write. A worker follows it while it runs, so a mode switch
// reaches every node without a restart. A cluster without it (made by a kctl before modes) runs
// `routes`.
import type { KubeManifest } from './client.ts';
import { cidrRange } from '../base/addresses.ts';

export const POD_NETWORK_NAMESPACE = 'kube-system';
export const POD_NETWORK_NAME = 'kctl-pod-network';
export const POD_NETWORK_COLLECTION = `/api/v1/namespaces/${POD_NETWORK_NAMESPACE}/configmaps`;
export const POD_NETWORK_PATH = `${POD_NETWORK_COLLECTION}/${POD_NETWORK_NAME}`;

/**
 * routes: a host route to each node's pod CIDR via its address (one L2 or a routed underlay).
 * vxlan: kernel VXLAN between the nodes' addresses, over any IP path (not encrypted).
 * wireguard: WireGuard between the nodes (encrypted, authenticated per node, crosses NAT).
 */
export const NETWORK_MODES = ['routes', 'vxlan', 'wireguard'] as const;
export type NetworkMode = (typeof NETWORK_MODES)[number];

/** none: nodes that cannot reach each other use relay nodes only; controllers: the controllers too. */
export const POD_NETWORK_RELAYS = ['none', 'controllers'] as const;
export type PodNetworkRelay = (typeof POD_NETWORK_RELAYS)[number];

export interface PodNetwork {
  mode: NetworkMode;
  /** Where wireguard traffic between two nodes that cannot reach each other may go besides relay nodes. */
  relay: PodNetworkRelay;
  /** NetworkPolicy enforced on the nodes (kube/network-policy.ts). */
  policy: boolean;
  vxlan: { vni: number; port: number };
  wireguard: { port: number };
  /**
   * The cluster's pod CIDR, the prefix length of each node's range (as the controllers run
   * kube-controller-manager) and the Service CIDR: a node routes another node's range only when
   * it has this shape, and to its address only when it is not reserved (base/ownership.ts).
   * Absent from a ConfigMap an older controller wrote.
   */
  ranges?: { clusterCIDR: string; nodeBits: number; serviceCIDR: string };
}

/** The VXLAN id and UDP port flannel and k3s use: a firewall opened for them fits kctl too. */
export const VXLAN_DEFAULTS = { vni: 1, port: 8472 } as const;
/** WireGuard's usual UDP port. */
export const WIREGUARD_DEFAULTS = { port: 51820 } as const;

/** What a worker runs when the cluster says nothing (a cluster from before modes). */
export const LEGACY_POD_NETWORK: PodNetwork = {
  mode: 'routes',
  relay: 'none',
  policy: false,
  vxlan: { ...VXLAN_DEFAULTS },
  wireguard: { ...WIREGUARD_DEFAULTS },
};

export function podNetworkConfigMap(n: PodNetwork): KubeManifest & { data: Record<string, string> } {
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: POD_NETWORK_NAME,
      namespace: POD_NETWORK_NAMESPACE,
      labels: { 'app.kubernetes.io/managed-by': 'kctl' },
    },
    data: {
      mode: n.mode,
      relay: n.relay,
      policy: String(n.policy),
      vxlanVNI: String(n.vxlan.vni),
      vxlanPort: String(n.vxlan.port),
      wireguardPort: String(n.wireguard.port),
      ...(n.ranges
        ? {
            clusterCIDR: n.ranges.clusterCIDR,
            nodeRangeBits: String(n.ranges.nodeBits),
            serviceCIDR: n.ranges.serviceCIDR,
          }
        : {}),
    },
  };
}

function intIn(s: string | undefined, min: number, max: number): number | undefined {
  if (s === undefined || !/^\d+$/.test(s)) return undefined;
  const v = Number(s);
  return v >= min && v <= max ? v : undefined;
}

/** The ConfigMap's data as a PodNetwork; throws naming the bad key (a worker keeps what it runs). */
export function parsePodNetwork(data: Record<string, string> | undefined): PodNetwork {
  const d = data ?? {};
  const mode = d.mode as NetworkMode;
  if (!NETWORK_MODES.includes(mode))
    throw new Error(
      `${POD_NETWORK_NAME}: mode is ${JSON.stringify(d.mode)}, expected one of ${NETWORK_MODES.join(', ')}`,
    );
  const vni = intIn(d.vxlanVNI, 1, 16_777_215);
  const port = intIn(d.vxlanPort, 1, 65_535);
  if (vni === undefined)
    throw new Error(`${POD_NETWORK_NAME}: vxlanVNI is ${JSON.stringify(d.vxlanVNI)}, expected 1-16777215`);
  if (port === undefined)
    throw new Error(`${POD_NETWORK_NAME}: vxlanPort is ${JSON.stringify(d.vxlanPort)}, expected 1-65535`);
  const wgPort = d.wireguardPort === undefined ? WIREGUARD_DEFAULTS.port : intIn(d.wireguardPort, 1, 65_535);
  if (wgPort === undefined)
    throw new Error(`${POD_NETWORK_NAME}: wireguardPort is ${JSON.stringify(d.wireguardPort)}, expected 1-65535`);
  // Absent: written by a kctl from before policies, whose clusters never enforced them.
  if (d.policy !== undefined && d.policy !== 'true' && d.policy !== 'false')
    throw new Error(`${POD_NETWORK_NAME}: policy is ${JSON.stringify(d.policy)}, expected true or false`);
  // Absent: written by a kctl from before relaying through the controllers.
  const relay = (d.relay ?? 'none') as PodNetworkRelay;
  if (!POD_NETWORK_RELAYS.includes(relay))
    throw new Error(
      `${POD_NETWORK_NAME}: relay is ${JSON.stringify(d.relay)}, expected one of ${POD_NETWORK_RELAYS.join(', ')}`,
    );
  // Absent: written by a kctl from before pod ranges were judged (the join token's CIDR stands in).
  let ranges: PodNetwork['ranges'];
  if (d.clusterCIDR !== undefined || d.nodeRangeBits !== undefined || d.serviceCIDR !== undefined) {
    const nodeBits = intIn(d.nodeRangeBits, 1, 128);
    for (const key of ['clusterCIDR', 'serviceCIDR'] as const)
      if (d[key] === undefined || !cidrRange(d[key]))
        throw new Error(
          `${POD_NETWORK_NAME}: ${key} is ${JSON.stringify(d[key])}, expected a CIDR such as 10.244.0.0/16`,
        );
    if (nodeBits === undefined)
      throw new Error(`${POD_NETWORK_NAME}: nodeRangeBits is ${JSON.stringify(d.nodeRangeBits)}, expected 1-128`);
    ranges = { clusterCIDR: d.clusterCIDR!, nodeBits, serviceCIDR: d.serviceCIDR! };
  }
  return {
    mode,
    relay,
    policy: d.policy === 'true',
    vxlan: { vni, port },
    wireguard: { port: wgPort },
    ...(ranges ? { ranges } : {}),
  };
}
