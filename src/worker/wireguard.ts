// The wireguard mode's tunnel on a node: wireguard-go (userspace WireGuard, from the payload) on a
// TUN device, supervised like the node's other children and configured over its UAPI socket in
// <run-dir>/wireguard. The node makes its key pair itself (<data-dir>/wireguard/private.key, 0600;
// the private key never leaves the node) and publishes the public key and its endpoint on its own
// Node; each peer is another node, allowed exactly that node's pod CIDR and its own address, so a
// node can send pod traffic only from its own pods' addresses.
//
// Pods also talk to other nodes' own addresses (metrics-server scrapes each kubelet). That traffic
// is kept off the underlay too: a policy rule sends what comes from this node's pods to a peer's
// address through kctl-wg (table POD_TO_NODE_TABLE; WireGuard's own packets come from the node's
// address, so the rule never catches them), masqueraded to kctl-wg's address like any pod traffic
// that leaves the pod CIDR.
import { existsSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { writeFileAtomic } from '../base/fs.ts';
import type { Logger } from '../base/log.ts';
import { forgetConnections, ip, ipJson, ipSucceeds, linkExists, setOnlyAddress } from '../host/ip.ts';
import {
  generatePrivateKey,
  isWireguardKey,
  publicKeyOf,
  wireguardGet,
  wireguardSet,
  type WireguardDeviceState,
  type WireguardPeerConfig,
} from '../host/wireguard.ts';
import { Supervisor } from '../supervisor/process.ts';
import type { WorkerPaths } from './paths.ts';

export const WIREGUARD_DEVICE = 'kctl-wg';
export const WIREGUARD_GO = 'wireguard-go';
/** Outer IPv4 (20) + UDP (8) + WireGuard (32) headers. */
export const WIREGUARD_OVERHEAD = 60;
/** Keeps NAT mappings open and lets a node behind NAT be reached: WireGuard's usual value. */
export const KEEPALIVE_SECONDS = 25;
/** On a node's Node: its WireGuard public key, and where its peers send to (absent: it has no reachable address). */
export const PUBLIC_KEY_ANNOTATION = 'kctl.dev/wireguard-public-key';
export const ENDPOINT_ANNOTATION = 'kctl.dev/wireguard-endpoint';
/** "true" on the Node of a worker started with --network-relay (relay.ts): it offers to relay. */
export const RELAY_ANNOTATION = 'kctl.dev/network-relay';
/**
 * "true", set by an admin: the cluster trusts the node as a relay. A node cannot set a label of
 * this prefix on itself (NodeRestriction), so a compromised node or a leaked worker token cannot
 * make a node that attracts other nodes' traffic.
 */
export const RELAY_LABEL = 'node-restriction.kubernetes.io/kctl-network-relay';

/** The routing table (and rule priority) that sends this node's pods' traffic to other nodes through kctl-wg. */
export const POD_TO_NODE_TABLE = '1770';

/** Pods' traffic to each of `addresses` (the peers' own) through kctl-wg: one rule for this node's pod CIDR, one route per peer. */
export async function routePodsToNodes(podCIDR: string, addresses: string[]): Promise<void> {
  const rules = ipJson<{ src?: string; srclen?: number }>(
    await ip(['-j', '-4', 'rule', 'show', 'table', POD_TO_NODE_TABLE]),
  );
  for (const r of rules)
    if (`${r.src}/${r.srclen}` !== podCIDR)
      await ip(['-4', 'rule', 'del', 'from', `${r.src}/${r.srclen}`, 'table', POD_TO_NODE_TABLE]);
  if (!rules.some((r) => `${r.src}/${r.srclen}` === podCIDR))
    await ip(['-4', 'rule', 'add', 'from', podCIDR, 'lookup', POD_TO_NODE_TABLE, 'priority', POD_TO_NODE_TABLE]);
  // The table exists once it holds a route.
  const listed = await ip(['-j', '-4', 'route', 'show', 'table', POD_TO_NODE_TABLE]).catch(() => '[]');
  const have = ipJson<{ dst: string }>(listed).map((r) => r.dst.replace(/\/32$/, ''));
  for (const a of addresses) {
    if (have.includes(a)) continue;
    await ip(['route', 'replace', `${a}/32`, 'dev', WIREGUARD_DEVICE, 'table', POD_TO_NODE_TABLE]);
    // A connection opened before (another mode) keeps its masquerade to the node's own address:
    // its packets would now go through the tunnel and the peer's replies around it. Forgotten,
    // it is reset and reopened through the tunnel (metrics-server's keep-alive to each kubelet).
    await forgetConnections(podCIDR, a);
  }
  for (const h of have) if (!addresses.includes(h)) await ip(['route', 'del', `${h}/32`, 'table', POD_TO_NODE_TABLE]);
}

/** Removes the rule and the table (nothing there is fine). */
export async function removePodToNodeRoutes(): Promise<void> {
  // One rule per pod CIDR this node had; deleting fails once none is left.
  for (let i = 0; i < 8 && (await ipSucceeds(['-4', 'rule', 'del', 'table', POD_TO_NODE_TABLE])); i++);
  await ip(['-4', 'route', 'flush', 'table', POD_TO_NODE_TABLE]).catch(() => undefined);
}

export interface WireguardPeer {
  publicKey: string;
  endpoint?: string;
  podCIDR: string;
  /**
   * The node's own address: its pods' traffic to it (kubelet's port, for metrics-server) goes
   * through the tunnel too. None when this node does not believe it (another Node reports it too).
   */
  address?: string;
}

/** What a peer may send and receive: its pods' addresses, and its own address for traffic with pods. */
export const allowedIPsOf = (p: WireguardPeer): string[] => [p.podCIDR, ...(p.address ? [`${p.address}/32`] : [])];

/** This node's key pair: made once, kept in the data dir. */
export async function nodeKeyPair(paths: WorkerPaths): Promise<{ privateKey: string; publicKey: string }> {
  const text = existsSync(paths.wireguardKey) ? (await readFile(paths.wireguardKey, 'utf8')).trim() : undefined;
  if (text !== undefined && !isWireguardKey(text))
    throw new Error(
      `${paths.wireguardKey} is not a WireGuard private key; remove it and restart the worker to make a new one`,
    );
  const privateKey = text ?? generatePrivateKey();
  if (text === undefined) await writeFileAtomic(paths.wireguardKey, privateKey + '\n', 0o600);
  return { privateKey, publicKey: publicKeyOf(privateKey) };
}

export class WireguardTunnel {
  private readonly process: Supervisor;
  private readonly socket: string;
  /** The endpoints last set per peer: set again only when the published one changes (a learnt one stays). */
  private readonly endpoints = new Map<string, string>();

  constructor(
    private readonly paths: WorkerPaths,
    private readonly log: Logger,
  ) {
    this.socket = join(paths.wireguardRunDir, `${WIREGUARD_DEVICE}.sock`);
    this.process = new Supervisor({
      name: WIREGUARD_GO,
      binary: join(paths.binDir, WIREGUARD_GO),
      args: ['-f', WIREGUARD_DEVICE],
      // Foreground without the banner that recommends the kernel module; errors only.
      env: { WG_PROCESS_FOREGROUND: '1', LOG_LEVEL: 'error' },
      cwd: paths.wireguardRunDir,
      runDir: paths.runDir,
      log,
      ready: async () => {
        await wireguardGet(this.socket);
      },
    });
  }

  /** wireguard-go running, its device up with this node's key, port, MTU and VTEP address; returns its peers as they are. */
  async ensure(
    o: { privateKey: string; publicKey: string; port: number; mtu: number; address: string },
    signal?: AbortSignal,
  ): Promise<WireguardDeviceState> {
    await mkdir(this.paths.wireguardRunDir, { recursive: true, mode: 0o700 });
    await this.process.init();
    await this.process.start();
    await this.process.ready(signal ?? AbortSignal.timeout(30_000));
    const state = await wireguardGet(this.socket);
    if (state.publicKey !== o.publicKey || state.listenPort !== o.port) {
      // A new wireguard-go (first start, or a restart after a crash): it knows nothing yet.
      this.endpoints.clear();
      await wireguardSet(this.socket, { privateKey: o.privateKey, listenPort: o.port });
    }
    const link = ipJson<{ mtu: number; flags?: string[] }>(await ip(['-j', 'link', 'show', WIREGUARD_DEVICE]))[0];
    if (link?.mtu !== o.mtu) await ip(['link', 'set', WIREGUARD_DEVICE, 'mtu', String(o.mtu)]);
    await setOnlyAddress(WIREGUARD_DEVICE, o.address);
    if (!link?.flags?.includes('UP')) await ip(['link', 'set', WIREGUARD_DEVICE, 'up']);
    // Setting the key and port leaves the peers as they were.
    return state;
  }

  /**
   * Sets the peers to exactly `peers` (`state`: the device's, from ensure): removed ones go; each
   * is allowed `allowedIPs` (relay.ts: its own, none while relayed, or a relay's with its relayed peers').
   */
  async syncPeers(peers: WireguardPeer[], state: WireguardDeviceState, allowed: Map<string, string[]>): Promise<void> {
    const want = new Map(peers.map((p) => [p.publicKey, p]));
    const remove = state.peers.map((p) => p.publicKey).filter((k) => !want.has(k));
    const changes: WireguardPeerConfig[] = [];
    for (const p of peers) {
      const have = state.peers.find((x) => x.publicKey === p.publicKey);
      const endpointChanged = p.endpoint !== undefined && this.endpoints.get(p.publicKey) !== p.endpoint;
      const allowedIPs = allowed.get(p.publicKey) ?? allowedIPsOf(p);
      const same = have && [...have.allowedIPs].sort().join() === [...allowedIPs].sort().join();
      if (same && !endpointChanged && have.keepaliveSeconds === KEEPALIVE_SECONDS) continue;
      changes.push({
        publicKey: p.publicKey,
        endpoint: endpointChanged ? p.endpoint : undefined,
        allowedIPs,
        keepaliveSeconds: KEEPALIVE_SECONDS,
      });
    }
    if (!remove.length && !changes.length) return;
    await wireguardSet(this.socket, { remove, peers: changes });
    for (const c of changes) if (c.endpoint) this.endpoints.set(c.publicKey, c.endpoint);
    for (const k of remove) this.endpoints.delete(k);
    this.log.info({ peers: peers.length, changed: changes.length, removed: remove.length }, 'wireguard peers updated');
  }

  /** The device and its peers now (for status); undefined when wireguard-go does not answer. */
  async state(): Promise<WireguardDeviceState | undefined> {
    return wireguardGet(this.socket).catch(() => undefined);
  }

  /** Stops wireguard-go: its device (with the routes through it) goes with it. */
  async stop(): Promise<void> {
    await removePodToNodeRoutes();
    await this.process.stop();
    this.endpoints.clear();
    for (let i = 0; i < 20 && (await linkExists(WIREGUARD_DEVICE)); i++) await sleep(100);
  }
}
