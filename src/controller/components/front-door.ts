// This cluster's part in its host's front door (spec.frontDoor): its names in the host's registry
// and a door on the shared port (every kctl with a front door listens there; any of them routes
// any name). The API name leads to kube-apiserver itself (which cannot read a PROXY header); the
// konnectivity, join and node API names lead to loopback handoff ports of this process, which
// take the client's address from the door's PROXY v2 header (with this registration's key) and
// pass the connection to the konnectivity server's agent port, the join endpoint and the node API
// tunnel (node-api-tunnel.ts), so their per-source bounds count clients, not the door. Started once those listen; stopped first, so the names stop
// leading here before the servers go.
import type { Socket } from 'node:net';
import type { Component, ComponentContext } from '../../base/component.ts';
import { errnoOf, UserError } from '../../base/errors.ts';
import type { Logger } from '../../base/log.ts';
import { DoorHandoff, newHandoffKey } from '../../frontdoor/handoff.ts';
import { FrontDoor, type FrontDoorStats } from '../../frontdoor/router.ts';
import {
  FrontDoorRoutes,
  registerFrontDoor,
  unregisterFrontDoor,
  type FrontDoorBackend,
} from '../../host/front-door-routes.ts';
import type { ClusterConfig } from '../config/config.ts';
import { frontDoorNames, type FrontDoorNames } from '../config/front-door.ts';
import type { ControllerPaths } from '../config/paths.ts';
import { localApiHost } from '../config/urls.ts';
import type { PkiPaths } from '../../pki/index.ts';
import { NodeApiTunnel } from './node-api-tunnel.ts';

/** A listener of this process the door hands connections to. */
export interface DoorTarget {
  acceptFromDoor(socket: Socket, client: string): void;
}

/** The nodes' endpoints of a full cluster (the node API tunnel is the door's own, with the API's certificate). */
export interface DoorTargets {
  konnectivity: DoorTarget;
  join: DoorTarget;
  pki: PkiPaths;
}

/** What `kctl status` shows of the front door on this controller. */
export interface FrontDoorReport {
  port: number;
  /** This cluster's names, by endpoint. */
  names: FrontDoorNames;
  /** This process's share of the door (every cluster's connections it routed, refused names). */
  door: FrontDoorStats;
}

export class FrontDoorComponent implements Component {
  readonly name = 'front-door';
  private log!: Logger;
  private door: FrontDoor | undefined;
  private readonly handoffs: DoorHandoff[] = [];
  private registered = false;
  private tunnel: NodeApiTunnel | undefined;

  constructor(
    private readonly cfg: ClusterConfig,
    private readonly paths: ControllerPaths,
    private readonly names: FrontDoorNames,
    private readonly targets?: DoorTargets,
  ) {}

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    const f = this.cfg.spec.frontDoor;
    const backends = await this.openHandoffs();
    await registerFrontDoor({ cluster: f.name, dataDir: this.paths.dataDir, pid: process.pid, names: backends });
    this.registered = true;
    const door = new FrontDoor({ port: f.port, address: f.address }, new FrontDoorRoutes(), this.log);
    try {
      await door.listen();
    } catch (err) {
      // Another kctl on the port shares it (SO_REUSEPORT); anything else holding it does not.
      if (errnoOf(err) === 'EADDRINUSE')
        throw new UserError(
          `the front door cannot listen on port ${f.port}: another program holds it; free it or set spec.frontDoor.port`,
        );
      throw err;
    }
    this.door = door;
    this.log.info(
      { port: door.port, names: Object.keys(backends) },
      'front door open: this cluster answers to its names',
    );
  }

  /** Where each name leads: kube-apiserver, and a handoff port per node endpoint (one key for both). */
  private async openHandoffs(): Promise<Record<string, FrontDoorBackend>> {
    const { api } = this.cfg.spec;
    const backends: Record<string, FrontDoorBackend> = {
      [this.names.api]: { endpoint: 'api', host: localApiHost(this.cfg), port: api.port },
    };
    if (!this.targets) return backends;
    const key = newHandoffKey();
    const tunnel = new NodeApiTunnel(this.targets.pki, { host: localApiHost(this.cfg), port: api.port }, this.log);
    this.tunnel = tunnel;
    const targets: Record<'konnectivity' | 'join' | 'nodeApi', DoorTarget> = {
      konnectivity: this.targets.konnectivity,
      join: this.targets.join,
      nodeApi: { acceptFromDoor: (socket, client) => tunnel.accept(socket, client) },
    };
    for (const endpoint of ['konnectivity', 'join', 'nodeApi'] as const) {
      const name = this.names[endpoint];
      if (name === undefined) continue;
      const target = targets[endpoint];
      const handoff = new DoorHandoff(
        endpoint,
        key,
        (socket, client) => target.acceptFromDoor(socket, client.address),
        this.log,
      );
      this.handoffs.push(handoff);
      backends[name] = { endpoint, host: '127.0.0.1', port: await handoff.listen(), key: key.toString('hex') };
    }
    return backends;
  }

  async stop(): Promise<void> {
    if (this.registered) await unregisterFrontDoor(this.paths.dataDir);
    this.registered = false;
    await this.door?.close();
    this.door = undefined;
    await Promise.all(this.handoffs.splice(0).map((h) => h.close()));
    this.tunnel?.close();
  }

  /** The door's names and this process's share of its traffic, once it is open. */
  report(): FrontDoorReport | undefined {
    return this.door ? { port: this.door.port, names: this.names, door: this.door.stats() } : undefined;
  }
}

/** The component when spec.frontDoor is on; a full cluster's node endpoints are handed to `targets`. */
export function frontDoorComponent(
  cfg: ClusterConfig,
  paths: ControllerPaths,
  targets?: DoorTargets,
): FrontDoorComponent | undefined {
  const names = frontDoorNames(cfg);
  return names ? new FrontDoorComponent(cfg, paths, names, targets) : undefined;
}
