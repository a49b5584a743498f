// Relays in wireguard mode: two nodes both behind NAT cannot reach each other (each one's
// published endpoint is a private address, and neither NAT lets the other's handshake in), but
// both reach a node that has a reachable address. A node started with --network-relay says so on
// its Node (annotation), and a node that has heard nothing from a peer for a while sends that
// peer's traffic through a relay it does hear from: the peer's addresses (its pod CIDR and its
// own address) move to the relay's WireGuard peer entry, which carries them both ways; the relay
// routes between its peers like any router. The peer stays configured with its keepalive, so
// the moment a direct handshake succeeds again (the NAT opened, the node moved) its addresses
// come back to it. Without a relay node, and where the cluster allows it, the silent peer's
// packets go through the controllers instead (controller-relay.ts).
import type { WireguardDeviceState } from '../host/wireguard.ts';

/**
 * Silence after which a peer is reached through a relay. Every kctl node keeps a 25 s keepalive
 * towards every peer, so a live direct path brings something at least every 25 s; two missed
 * keepalives and some slack. A new peer has this long to make its first handshake.
 */
export const RELAY_AFTER_SILENT_MS = 60_000;

export interface RelayCandidate {
  name: string;
  publicKey: string;
  /** The node offers to relay (kctl worker --network-relay). */
  relay: boolean;
  /** Its pod CIDR and its own address, as WireGuard allowed IPs. */
  allowedIPs: string[];
}

/** When each peer was last heard from directly: its received bytes, as WireGuard counts them, moving. */
export class PeerLiveness {
  private readonly seen = new Map<string, { rxBytes: number; heardAt: number }>();

  /** Takes the device's counters; a peer seen for the first time counts as heard now (its grace). */
  update(state: WireguardDeviceState, now = Date.now()): void {
    const present = new Set<string>();
    for (const p of state.peers) {
      present.add(p.publicKey);
      const last = this.seen.get(p.publicKey);
      if (!last || p.rxBytes !== last.rxBytes) this.seen.set(p.publicKey, { rxBytes: p.rxBytes, heardAt: now });
    }
    for (const k of [...this.seen.keys()]) if (!present.has(k)) this.seen.delete(k);
  }

  /** Heard from within RELAY_AFTER_SILENT_MS (a peer not on the device yet: true, it has not had its chance). */
  direct(publicKey: string, now = Date.now()): boolean {
    const s = this.seen.get(publicKey);
    return !s || now - s.heardAt < RELAY_AFTER_SILENT_MS;
  }
}

export interface RelayPlan {
  /** Allowed IPs per peer (public key): its own, or none while it is relayed; a relay's carry its relayed peers' too. */
  allowedIPs: Map<string, string[]>;
  /** Relayed peer (node name) -> the relay (node name, or CONTROLLERS) its traffic goes through. */
  via: Map<string, string>;
}

/** `via` of a peer whose WireGuard packets go through the controllers (controller-relay.ts). */
export const CONTROLLERS = 'controllers';

export interface RelayChoices {
  /** The cluster lets nodes relay through the controllers (spec.network.relay: controllers). */
  controllers?: boolean;
  /**
   * Peers (public keys) already going through the controllers. They stay there (their packets
   * then come through the controllers, so hearing from them says nothing about a direct path)
   * until a relay node is heard or relaying through the controllers is switched off.
   */
  throughControllers?: ReadonlySet<string>;
}

/**
 * Who carries whose addresses. A peer heard from directly keeps its own; a silent one moves to
 * the first relay (by name: every node picks the same) that is heard from and is not the peer
 * itself; with no such relay it goes through the controllers when the cluster allows that (it
 * keeps its addresses: only its endpoint moves), else it keeps its own and waits for a direct
 * handshake.
 */
export function planRelays(
  peers: RelayCandidate[],
  direct: (publicKey: string) => boolean,
  choices: RelayChoices = {},
): RelayPlan {
  const sticky = choices.controllers ? (choices.throughControllers ?? new Set<string>()) : new Set<string>();
  const heard = (p: RelayCandidate): boolean => !sticky.has(p.publicKey) && direct(p.publicKey);
  const relays = peers.filter((p) => p.relay && heard(p)).sort((a, b) => a.name.localeCompare(b.name));
  const allowedIPs = new Map(peers.map((p) => [p.publicKey, [] as string[]]));
  const via = new Map<string, string>();
  for (const p of peers) {
    const relay = heard(p) ? undefined : relays.find((r) => r.publicKey !== p.publicKey);
    allowedIPs.get(relay?.publicKey ?? p.publicKey)!.push(...p.allowedIPs);
    if (relay) via.set(p.name, relay.name);
    else if (!heard(p) && choices.controllers) via.set(p.name, CONTROLLERS);
  }
  return { allowedIPs, via };
}
