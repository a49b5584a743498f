// The other Nodes as this node may believe them, for its pod network (overlay.ts puts the mode's
// routes, VXLAN peers or WireGuard peers in place from them): what each Node publishes about itself
// (its address, pod range, WireGuard key and endpoint, relay offer), judged by the ownership rule
// (base/ownership.ts) before anything is routed to it.
import {
  canonicalIdentifier,
  judgePodRanges,
  keptAddresses,
  conflictProblem,
  nobodysProblem,
  type RefusedPodRange,
  type ReservedSpace,
} from '../base/ownership.ts';
import { isWireguardKey } from '../host/wireguard.ts';
import { ENDPOINT_ANNOTATION, PUBLIC_KEY_ANNOTATION, RELAY_ANNOTATION, RELAY_LABEL } from './wireguard.ts';

export interface NodeInfo {
  name: string;
  podCIDR?: string;
  internalIP?: string;
  /** Its WireGuard public key and endpoint, as it publishes them (annotations). */
  wireguardKey?: string;
  wireguardEndpoint?: string;
  /** It relays WireGuard traffic between nodes that cannot reach each other: it offers (kctl worker --network-relay) and an admin approved (RELAY_LABEL). */
  relay?: boolean;
  /** It offers to relay (its annotation), approved or not. */
  offersRelay?: boolean;
  /** Addresses an admin said it keeps though other Nodes report them too (KEEPS_ADDRESSES_ANNOTATION). */
  keeps?: string[];
}

export interface KubeNode {
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: { podCIDR?: string; podCIDRs?: string[] };
  status?: { addresses?: { type: string; address: string }[] };
}

const ENDPOINT = /^(\d{1,3}\.){3}\d{1,3}:\d{1,5}$/;

export function nodeInfo(n: KubeNode): NodeInfo {
  const a = n.metadata.annotations ?? {};
  return {
    name: n.metadata.name,
    podCIDR: n.spec?.podCIDR,
    internalIP: n.status?.addresses?.find((x) => x.type === 'InternalIP')?.address,
    wireguardKey: isWireguardKey(a[PUBLIC_KEY_ANNOTATION]) ? a[PUBLIC_KEY_ANNOTATION] : undefined,
    wireguardEndpoint: ENDPOINT.test(a[ENDPOINT_ANNOTATION] ?? '') ? a[ENDPOINT_ANNOTATION] : undefined,
    // Offered by the node and approved by an admin (a label no node can set on itself).
    relay: a[RELAY_ANNOTATION] === 'true' && n.metadata.labels?.[RELAY_LABEL] === 'true',
    offersRelay: a[RELAY_ANNOTATION] === 'true',
    keeps: keptAddresses(a),
  };
}

/** A peer left out of the pod network, or a part of what it publishes, with why. */
export interface RefusedPeer {
  node: string;
  /** What is refused: its address (`address 10.0.0.1`) or its WireGuard key (`wireguard key`). */
  what: string;
  reason: string;
}

/**
 * The Nodes as this node may believe them, by the ownership rule (base/ownership.ts):
 * - another node's pod range only as judgePodRanges leaves it (the allocator's size, inside the
 *   cluster CIDR, held by no other node), so no Node can draw pods' traffic with a range it wrote;
 * - its address only if it is nobody's reserved space (a controller's, a Service IP, loopback,
 *   link-local, another node's pod range): a node reporting a controller's address would
 *   otherwise be given the pods' traffic to the API (a WireGuard allowed IP, a route's gateway),
 *   and such a node is no peer at all;
 *   and only if no other Node reports it too (two sites with one private range, or a squatter),
 *   unless an admin named it the keeper: a shared address is nobody's, no first reporter;
 * - its WireGuard endpoint only at that address (else WireGuard learns it from handshakes);
 * - its WireGuard key only if no other Node publishes the same (a copied key is nobody's).
 * Its own Node as it says (the CNI config follows its range). `refused` and `refusedPeers` say
 * what was left out, and why.
 */
export function routableNodes(
  nodes: KubeNode[],
  self: string,
  reserved: ReservedSpace,
): { nodes: NodeInfo[]; refused: RefusedPodRange[]; refusedPeers: RefusedPeer[] } {
  const ranges = (n: KubeNode): string[] => n.spec?.podCIDRs ?? (n.spec?.podCIDR ? [n.spec.podCIDR] : []);
  const verdict = judgePodRanges(
    nodes.map((n) => ({ name: n.metadata.name, podCIDRs: ranges(n) })),
    reserved,
  );
  const refusedPeers: RefusedPeer[] = [];
  const infos = nodes.map(nodeInfo);
  const keyHolders = new Map<string, string[]>();
  for (const i of infos)
    if (i.wireguardKey) keyHolders.set(i.wireguardKey, [...(keyHolders.get(i.wireguardKey) ?? []), i.name]);
  const reporters = new Map<string, NodeInfo[]>();
  for (const i of infos)
    if (i.internalIP)
      reporters.set(canonicalIdentifier(i.internalIP), [
        ...(reporters.get(canonicalIdentifier(i.internalIP)) ?? []),
        i,
      ]);
  const believed = infos.map((info): NodeInfo => {
    if (info.name === self) return info;
    const podCIDRs = verdict.ranges.get(info.name) ?? [];
    const out: NodeInfo = { ...info, podCIDR: podCIDRs.find((c) => !c.includes(':')) };
    if (info.internalIP) {
      const ip = canonicalIdentifier(info.internalIP);
      const reservedProblem = nobodysProblem(ip, false, { name: info.name, addresses: [], podCIDRs }, reserved);
      const problem = reservedProblem ?? conflictProblem(ip, info.name, reporters.get(ip) ?? []);
      if (problem) {
        refusedPeers.push({ node: info.name, what: `address ${info.internalIP}`, reason: problem });
        out.internalIP = undefined;
        // A node that reports reserved space lies: it is no peer at all. One whose address another
        // Node reports too may be honest (two sites, one private range): WireGuard still carries its pods.
        if (reservedProblem) out.podCIDR = undefined;
      }
    }
    const endpointHost = info.wireguardEndpoint?.replace(/:\d+$/, '');
    if (endpointHost !== undefined && endpointHost !== out.internalIP) {
      if (out.internalIP)
        refusedPeers.push({
          node: info.name,
          what: `wireguard endpoint ${info.wireguardEndpoint}`,
          reason: `not its address ${out.internalIP}`,
        });
      out.wireguardEndpoint = undefined;
    }
    const holders = info.wireguardKey ? (keyHolders.get(info.wireguardKey) ?? []) : [];
    if (holders.length > 1) {
      refusedPeers.push({
        node: info.name,
        what: 'wireguard key',
        reason: `also published by node ${holders.filter((h) => h !== info.name).join(', ')}`,
      });
      out.wireguardKey = undefined;
    }
    return out;
  });
  return { nodes: believed, refused: verdict.refused, refusedPeers };
}
