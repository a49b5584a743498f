// This cluster's part in its host's front door (spec.frontDoor): its name in the host's registry,
// leading to its own kube-apiserver, and a door on the shared port (every kctl with a front door
// listens there; any of them routes any name). Started once the API listens; stopped first, so the
// name stops leading here before the server goes.
import type { Component, ComponentContext } from '../../base/component.ts';
import { errnoOf, UserError } from '../../base/errors.ts';
import type { Logger } from '../../base/log.ts';
import { FrontDoor, type FrontDoorStats } from '../../frontdoor/router.ts';
import {
  FrontDoorRoutes,
  registerFrontDoor,
  unregisterFrontDoor,
  type FrontDoorBackend,
} from '../../host/front-door-routes.ts';
import type { ClusterConfig } from '../config/config.ts';
import { frontDoorNames } from '../config/front-door.ts';
import type { ControllerPaths } from '../config/paths.ts';

/** Where this cluster's names lead: its own kube-apiserver, at the address its config names. */
export function frontDoorBackends(cfg: ClusterConfig): Record<string, FrontDoorBackend> {
  const names = frontDoorNames(cfg);
  return names ? { [names.api]: { endpoint: 'api', host: cfg.spec.api.address, port: cfg.spec.api.port } } : {};
}

export class FrontDoorComponent implements Component {
  readonly name = 'front-door';
  private log!: Logger;
  private door: FrontDoor | undefined;
  private registered = false;

  constructor(
    private readonly cfg: ClusterConfig,
    private readonly paths: ControllerPaths,
  ) {}

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    const f = this.cfg.spec.frontDoor;
    const names = frontDoorBackends(this.cfg);
    await registerFrontDoor({ cluster: f.name, dataDir: this.paths.dataDir, pid: process.pid, names });
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
    this.log.info({ port: door.port, names: Object.keys(names) }, 'front door open: this cluster answers to its names');
  }

  async stop(): Promise<void> {
    if (this.registered) await unregisterFrontDoor(this.paths.dataDir);
    this.registered = false;
    await this.door?.close();
    this.door = undefined;
  }

  /** This process's share of the door: connections per cluster, refused names. */
  stats(): FrontDoorStats | undefined {
    return this.door?.stats();
  }
}

/** The component when spec.frontDoor is on. */
export function frontDoorComponent(cfg: ClusterConfig, paths: ControllerPaths): FrontDoorComponent | undefined {
  return cfg.spec.frontDoor.enabled ? new FrontDoorComponent(cfg, paths) : undefined;
}
