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
import { readFile } from 'node:fs/promises';
import { joinHostPort } from '../../base/addresses.ts';
import { errnoOf, messageOf, UserError } from '../../base/errors.ts';
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
  /** This process's share of the door (every cluster's connections it routed, refused names); none behind an external door. */
  door?: FrontDoorStats;
  /** Behind another program's door (spec.frontDoor.external): where nodes reach it, and this controller's handoff ports. */
  external?: { address: string; handoffs: { endpoint: string; port: number; refused: number }[] };
}

export class FrontDoorComponent implements Component {
  readonly name = 'front-door';
  private log!: Logger;
  private door: FrontDoor | undefined;
  private readonly handoffs: DoorHandoff[] = [];
  private registered = false;
  private tunnel: NodeApiTunnel | undefined;
  private readonly handoffPorts = new Map<DoorHandoff, number>();

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
    if (f.external) {
      // Another program's door (a management cluster's) routes the names here: only the handoffs.
      const backends = await this.openHandoffs(await readDoorKey(f.external.keyFile));
      this.log.info(
        { door: joinHostPort(f.address ?? '', f.port), names: Object.keys(backends) },
        'behind an external front door: its handoff ports listen',
      );
      return;
    }
    const backends = await this.openHandoffs(newHandoffKey());
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

  /** Where each name leads: kube-apiserver, and a handoff port per node endpoint (one key for all). */
  private async openHandoffs(key: Buffer): Promise<Record<string, FrontDoorBackend>> {
    const { api, frontDoor } = this.cfg.spec;
    const backends: Record<string, FrontDoorBackend> = {
      [this.names.api]: { endpoint: 'api', host: localApiHost(this.cfg), port: api.port },
    };
    if (!this.targets) return backends;
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
      const port = await listenHandoff(
        handoff,
        frontDoor.external && { port: frontDoor.external.handoffPorts[endpoint], endpoint },
      );
      this.handoffPorts.set(handoff, port);
      backends[name] = { endpoint, host: '127.0.0.1', port, key: key.toString('hex') };
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

  /** The door's names and this process's share of its traffic, once it is open (behind an external door, the handoffs). */
  report(): FrontDoorReport | undefined {
    const f = this.cfg.spec.frontDoor;
    if (f.external)
      return {
        port: f.port,
        names: this.names,
        external: {
          address: joinHostPort(f.address ?? '', f.port),
          handoffs: this.handoffs.map((h) => ({
            endpoint: h.endpoint,
            port: this.handoffPorts.get(h) ?? 0,
            refused: h.refused,
          })),
        },
      };
    return this.door ? { port: this.door.port, names: this.names, door: this.door.stats() } : undefined;
  }
}

/** An external door's key: 32 bytes, written as 64 hex digits (the operator writes it in the pod's Secret). */
export async function readDoorKey(file: string): Promise<Buffer> {
  const text = (
    await readFile(file, 'utf8').catch((err: unknown) => {
      throw new UserError(`spec.frontDoor.external.keyFile ${file}: ${messageOf(err)}; give the file the door's key`);
    })
  ).trim();
  if (!/^[0-9a-f]{64}$/.test(text))
    throw new UserError(
      `spec.frontDoor.external.keyFile ${file}: expected 64 hex digits (the door's 32-byte key); write the key the door was given`,
    );
  return Buffer.from(text, 'hex');
}

/** A handoff on its loopback port (the host's door), or on an external door's fixed port of every address. */
async function listenHandoff(
  handoff: DoorHandoff,
  fixed: false | undefined | { port: number; endpoint: string },
): Promise<number> {
  if (!fixed) return handoff.listen();
  try {
    return await handoff.listen({ port: fixed.port, host: '0.0.0.0' });
  } catch (err) {
    if (errnoOf(err) === 'EADDRINUSE')
      throw new UserError(
        `spec.frontDoor.external.handoffPorts.${fixed.endpoint}: port ${fixed.port} is taken by another program; free it or pick another port`,
      );
    throw err;
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
