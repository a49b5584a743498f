// What each pod network mode puts on a node (network.ts runs it on every sync): the other nodes
// as peers, the route to each peer's pod CIDR, and the mode's device:
//   routes     none: via the peer's InternalIP;
//   vxlan      kernel VXLAN (host/vxlan.ts): via the peer's VTEP, on-link on kctl-vxlan;
//   wireguard  wireguard-go (wireguard.ts): on kctl-wg, which picks the peer by its pod CIDR,
//              or a relay for a peer it has not heard from (relay.ts), or the controllers
//              (controller-relay.ts).
// Leaving a mode removes its device (and with it the routes through it).
import { cidrAddress } from '../base/addresses.ts';
import type { RefusedPodRange } from '../base/ownership.ts';
import type { NodeInfo, RefusedPeer } from './peers.ts';
import type { PodRoute } from './pod-routes.ts';
import type { KubeClient } from '../kube/client.ts';
import type { Logger } from '../base/log.ts';
import type { NetworkMode, PodNetwork } from '../kube/pod-network.ts';
import {
  allowVxlanFrom,
  ensureVxlanDevice,
  interfaceMtu,
  removeVxlan,
  syncVxlanPeers,
  VXLAN_DEVICE,
  VXLAN_OVERHEAD,
} from '../host/vxlan.ts';
import type { WireguardDeviceState } from '../host/wireguard.ts';
import type { WorkerPaths } from './paths.ts';
import { CONTROLLERS, PeerLiveness, planRelays } from './relay.ts';
import type { ControllerRelay } from './controller-relay.ts';
import {
  allowedIPsOf,
  ENDPOINT_ANNOTATION,
  nodeKeyPair,
  PUBLIC_KEY_ANNOTATION,
  RELAY_ANNOTATION,
  routePodsToNodes,
  WIREGUARD_DEVICE,
  WIREGUARD_OVERHEAD,
  WireguardTunnel,
} from './wireguard.ts';

/** A node's VTEP / tunnel address: its pod CIDR's network address. */
const networkAddress = (cidr: string): string => cidrAddress(cidr, 0);

type Peer = NodeInfo & { podCIDR: string; internalIP: string };

/** The other nodes this one routes to: each with a podCIDR and an InternalIP (IPv4 only for now). */
export function peerNodes(nodes: NodeInfo[], self: string): Peer[] {
  return nodes.filter(
    (n): n is Peer =>
      n.name !== self && !!n.podCIDR && !!n.internalIP && !n.podCIDR.includes(':') && !n.internalIP.includes(':'),
  );
}

type KeyedPeer = NodeInfo & { podCIDR: string; wireguardKey: string };

/** The other nodes WireGuard carries pods to: each with a podCIDR and a key; an address only if this node believes it. */
export function wireguardPeers(nodes: NodeInfo[], self: string): KeyedPeer[] {
  return nodes.filter(
    (n): n is KeyedPeer => n.name !== self && !!n.podCIDR && !n.podCIDR.includes(':') && !!n.wireguardKey,
  );
}

/** Routes this node needs, podCIDR -> route; in wireguard mode only to peers that published a key. */
export function desiredRoutes(nodes: NodeInfo[], self: string, mode: NetworkMode = 'routes'): Map<string, PodRoute> {
  if (mode === 'wireguard')
    return new Map(wireguardPeers(nodes, self).map((n) => [n.podCIDR, { dev: WIREGUARD_DEVICE }]));
  const peers = peerNodes(nodes, self);
  const route = (n: Peer): PodRoute =>
    mode === 'vxlan' ? { via: networkAddress(n.podCIDR), dev: VXLAN_DEVICE } : { via: n.internalIP };
  return new Map(peers.map((n) => [n.podCIDR, route(n)]));
}

/** What `kctl status` shows of the pod network on a node. */
export interface PodNetworkStatus {
  mode?: NetworkMode;
  /** The pods' MTU the mode sets (none: the kernel's default). */
  mtu?: number;
  /** The other nodes: in wireguard mode with handshake age and bytes (WireGuard's view). */
  peers: {
    node: string;
    address?: string;
    endpoint?: string;
    lastHandshakeSecondsAgo?: number;
    rxBytes?: number;
    txBytes?: number;
    /** The relay this node's traffic with the peer goes through (not heard from directly): a node, or "controllers". */
    via?: string;
  }[];
  /** Pod ranges of Nodes this node routes nothing to, with why (routableNodes). */
  refusedRanges?: RefusedPodRange[];
  /** Addresses and WireGuard keys of Nodes this node does not believe, with why (routableNodes). */
  refusedPeers?: RefusedPeer[];
  /** This node offers to relay for others (kctl worker --network-relay); approved: an admin's label says the others may use it. */
  relay?: { approved: boolean };
}

export class Overlay {
  private mode?: NetworkMode;
  private wireguard?: WireguardTunnel;
  private readonly liveness = new PeerLiveness();
  /** Relayed peer -> relay, as the last sync set them. */
  private via = new Map<string, string>();
  /** Peers (public keys) whose packets go through the controllers since the last sync. */
  private throughControllers = new Set<string>();

  constructor(
    private readonly paths: WorkerPaths,
    private readonly nodeName: string,
    private readonly kube: KubeClient,
    private readonly log: Logger,
    /** This node relays for others (kctl worker --network-relay), for the pods of `clusterCIDR`. */
    private readonly relay?: { clusterCIDR: string },
    /** Its end of relaying through the controllers (spec.network.relay: controllers). */
    private readonly controllerRelay?: ControllerRelay,
  ) {}

  /** A datagram the controllers relayed from another node. */
  deliver(fromNode: string, data: Buffer): void {
    if (this.mode === 'wireguard') this.controllerRelay?.deliver(fromNode, data);
  }

  /** Puts `net`'s device and peers in place (and takes the previous mode's away); returns the pods' MTU (undefined: the kernel's default) and per-peer errors. */
  async apply(net: PodNetwork, nodes: NodeInfo[], podCIDR: string): Promise<{ mtu?: number; errors: string[] }> {
    const previous = this.mode;
    // The first sync after a start does not know what an earlier run left: clear the others.
    if (net.mode !== 'vxlan' && previous !== net.mode) await removeVxlan();
    if (net.mode !== 'wireguard' && this.wireguard) await this.wireguard.stop();
    if (net.mode !== 'wireguard') this.controllerRelay?.close();
    this.mode = net.mode;
    if (net.mode === 'routes') return { errors: [] };
    const self = nodes.find((n) => n.name === this.nodeName);
    if (!self?.internalIP) throw new Error('this node has no InternalIP on its Node yet');
    const peers = peerNodes(nodes, this.nodeName);
    if (net.mode === 'vxlan') {
      const mtu = (await interfaceMtu(self.internalIP)) - VXLAN_OVERHEAD;
      await ensureVxlanDevice({
        vni: net.vxlan.vni,
        port: net.vxlan.port,
        localIP: self.internalIP,
        mtu,
        vtep: networkAddress(podCIDR),
      });
      const errors = await syncVxlanPeers(
        peers.map((p) => ({ vtep: networkAddress(p.podCIDR), underlayIP: p.internalIP })),
      );
      await allowVxlanFrom(
        net.vxlan.port,
        peers.map((p) => p.internalIP),
      );
      return { mtu, errors };
    }
    const mtu = (await interfaceMtu(self.internalIP)) - WIREGUARD_OVERHEAD;
    const keys = await nodeKeyPair(this.paths);
    this.wireguard ??= new WireguardTunnel(this.paths, this.log);
    const state = await this.wireguard.ensure({
      ...keys,
      port: net.wireguard.port,
      mtu,
      address: networkAddress(podCIDR),
    });
    await this.publish(self, keys.publicKey, `${self.internalIP}:${net.wireguard.port}`);
    const keyed = wireguardPeers(nodes, this.nodeName).map((p) => ({
      name: p.name,
      relay: !!p.relay,
      publicKey: p.wireguardKey,
      endpoint: p.wireguardEndpoint,
      podCIDR: p.podCIDR,
      address: p.internalIP,
    }));
    this.liveness.update(state);
    const controllers = net.relay === 'controllers' && !!this.controllerRelay;
    this.controllerRelay?.update(
      keyed.map((p) => p.name),
      net.wireguard.port,
    );
    const plan = planRelays(
      keyed.map((p) => ({ ...p, allowedIPs: allowedIPsOf(p) })),
      (key) => this.liveness.direct(key),
      { controllers, throughControllers: this.throughControllers },
    );
    for (const [peer, relay] of plan.via)
      if (this.via.get(peer) !== relay)
        this.log.warn(
          { peer, relay },
          `nothing heard from ${peer}: its traffic goes through ${relay === CONTROLLERS ? 'the controllers' : relay}`,
        );
    for (const peer of this.via.keys())
      if (!plan.via.has(peer)) this.log.info({ peer }, `${peer} answers directly again`);
    this.via = plan.via;
    this.throughControllers = new Set(
      keyed.filter((p) => plan.via.get(p.name) === CONTROLLERS).map((p) => p.publicKey),
    );
    // A peer through the controllers is sent to this node's local socket for it.
    const endpoints = await Promise.all(
      keyed.map(async (p) =>
        this.throughControllers.has(p.publicKey)
          ? { ...p, endpoint: await this.controllerRelay!.endpointFor(p.name) }
          : p,
      ),
    );
    await this.wireguard.syncPeers(endpoints, state, plan.allowedIPs);
    // A relay also carries other nodes' pods' traffic to a peer's own address (metrics-server to a
    // kubelet behind NAT): the rule then takes the whole cluster's pod CIDR.
    await routePodsToNodes(
      this.relay?.clusterCIDR ?? podCIDR,
      keyed.flatMap((p) => (p.address ? [p.address] : [])),
    );
    return { mtu, errors: [] };
  }

  /** The node's public key and endpoint on its own Node (the Node authorizer lets a node patch only itself). */
  private async publish(self: NodeInfo, publicKey: string, endpoint: string): Promise<void> {
    if (self.wireguardKey === publicKey && self.wireguardEndpoint === endpoint && !!self.offersRelay === !!this.relay)
      return;
    const annotations = {
      [PUBLIC_KEY_ANNOTATION]: publicKey,
      [ENDPOINT_ANNOTATION]: endpoint,
      [RELAY_ANNOTATION]: this.relay ? 'true' : null,
    };
    await this.kube.request('PATCH', `/api/v1/nodes/${this.nodeName}`, { metadata: { annotations } });
    this.log.info({ publicKey, endpoint, relay: !!this.relay }, "published this node's WireGuard key and endpoint");
  }

  /** The mode and each peer as the device sees it (`nodes`: the watched Nodes). */
  async status(nodes: NodeInfo[], mtu: number | undefined): Promise<PodNetworkStatus> {
    if (this.mode !== 'wireguard')
      return {
        mode: this.mode,
        mtu,
        peers: peerNodes(nodes, this.nodeName).map((p) => ({ node: p.name, address: p.internalIP })),
      };
    const peers = wireguardPeers(nodes, this.nodeName);
    const state: WireguardDeviceState | undefined = await this.wireguard?.state();
    const now = Date.now() / 1000;
    return {
      mode: this.mode,
      mtu,
      peers: peers.map((p) => {
        const wg = state?.peers.find((x) => x.publicKey === p.wireguardKey);
        return {
          node: p.name,
          address: p.internalIP,
          endpoint: wg?.endpoint,
          lastHandshakeSecondsAgo: wg?.lastHandshake ? Math.round(now - wg.lastHandshake) : undefined,
          rxBytes: wg?.rxBytes,
          txBytes: wg?.txBytes,
          // A peer that chose the controllers for both is answered there too (WireGuard roaming).
          ...(this.via.has(p.name)
            ? { via: this.via.get(p.name) }
            : this.controllerRelay?.owns(wg?.endpoint)
              ? { via: CONTROLLERS }
              : {}),
        };
      }),
      ...(this.relay ? { relay: { approved: !!nodes.find((n) => n.name === this.nodeName)?.relay } } : {}),
    };
  }

  /** At the worker's stop: wireguard-go goes with it (routes and the VXLAN device stay for the next start). */
  async stop(): Promise<void> {
    await this.wireguard?.stop();
    this.controllerRelay?.close();
  }
}
