// Relaying through the controllers (spec.network.relay: controllers), the node's end. A peer
// this node cannot reach, with no relay node to go through, gets a local endpoint instead of its
// own: a UDP socket on 127.0.0.1 that this process holds for that peer. What wireguard-go sends
// there (already encrypted for the peer) goes to the controllers over the konnectivity agent's
// streams, which pass it to the peer's agent; that node hands it to its wireguard-go from its own
// socket for this node, and its wireguard-go, having authenticated the packet, answers there (a
// WireGuard peer's endpoint follows the packets it authenticates). So one side choosing the
// controllers is enough for both, and the controllers never see a pod's packet in clear.
import { createSocket, type Socket } from 'node:dgram';
import type { Logger } from '../base/log.ts';

/** How this node reaches the controllers' relay: the konnectivity agent. */
export interface DatagramLink {
  /** False when no controller stream can take it now (lost, as datagrams may be). */
  send(toNode: string, data: Buffer): boolean;
}

const LOOPBACK = '127.0.0.1';

export class ControllerRelay {
  /** One local socket per peer node, made when first needed. */
  private readonly sockets = new Map<string, Promise<Socket>>();
  private readonly ports = new Map<string, number>();
  /** Nodes datagrams may come from and go to: the peers of the last sync. */
  private peers = new Set<string>();
  /** wireguard-go's port on this node; nothing is relayed before the device is up. */
  private wireguardPort: number | undefined;

  constructor(
    private readonly link: DatagramLink,
    private readonly log: Logger,
  ) {}

  /** The peers of this sync and wireguard-go's port; sockets of nodes no longer peers close. */
  update(peers: string[], wireguardPort: number): void {
    this.peers = new Set(peers);
    this.wireguardPort = wireguardPort;
    for (const node of [...this.sockets.keys()]) if (!this.peers.has(node)) this.closeOne(node);
  }

  /** The endpoint to give wireguard-go for `node`: this node's socket for it. */
  async endpointFor(node: string): Promise<string> {
    await this.socketFor(node);
    return `${LOOPBACK}:${this.ports.get(node)}`;
  }

  /** True for an endpoint that is one of this relay's sockets (kctl status: the peer goes through the controllers). */
  owns(endpoint: string | undefined): boolean {
    return !!endpoint && [...this.ports.values()].some((p) => endpoint === `${LOOPBACK}:${p}`);
  }

  /** A datagram the controllers relayed from `fromNode`: to wireguard-go, from this node's socket for that peer. */
  deliver(fromNode: string, data: Buffer): void {
    const port = this.wireguardPort;
    if (port === undefined || !this.peers.has(fromNode)) return;
    this.socketFor(fromNode).then(
      (s) => s.send(data, port, LOOPBACK),
      () => undefined,
    );
  }

  private socketFor(node: string): Promise<Socket> {
    let s = this.sockets.get(node);
    if (!s) {
      s = this.open(node);
      this.sockets.set(node, s);
      s.catch((err: Error) => {
        this.sockets.delete(node);
        this.log.warn({ peer: node }, `cannot open the local relay socket for ${node}: ${err.message}`);
      });
    }
    return s;
  }

  private open(node: string): Promise<Socket> {
    return new Promise((resolve, reject) => {
      const socket = createSocket('udp4');
      socket.once('error', reject);
      socket.bind(0, LOOPBACK, () => {
        socket.off('error', reject);
        socket.on('error', (err) => this.log.debug({ peer: node }, `relay socket: ${err.message}`));
        this.ports.set(node, socket.address().port);
        socket.on('message', (msg, from) => {
          // Only wireguard-go's own packets for the peer go out.
          if (from.address === LOOPBACK && from.port === this.wireguardPort) this.link.send(node, msg);
        });
        resolve(socket);
      });
    });
  }

  private closeOne(node: string): void {
    const s = this.sockets.get(node);
    this.sockets.delete(node);
    this.ports.delete(node);
    void s?.then((socket) => socket.close()).catch(() => undefined);
  }

  close(): void {
    for (const node of [...this.sockets.keys()]) this.closeOne(node);
    this.wireguardPort = undefined;
  }
}
