// `kctl operator door`: the management cluster's front door. One TLS port (exposed by a Service
// of its own) routes every hosted cluster whose spec.exposure.type is FrontDoor, by the server
// name in each ClientHello, to that cluster's Service, and splices the bytes untouched (the
// router of frontdoor/, as on a controller host). The API name leads to kube-apiserver; the nodes'
// names (konnectivity, join, node API) lead to the pods' handoff ports with a PROXY v2 header that
// names the client and carries the cluster's key, so the pods' per-client bounds count nodes, not
// the door. Every replica routes every name (no leader): the routes come from KctlClusters and
// Services the door watches, the keys from the door key Secret. A name is its cluster's
// metadata.name under the door's domain; two clusters of one name (in two namespaces): the older
// keeps it, and the younger's name leads nowhere (its status says so, reconcile.ts).
import type { Component, ComponentContext } from '../base/component.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { messageOf, UserError } from '../base/errors.ts';
import type { Logger } from '../base/log.ts';
import { HANDOFF_PORTS } from '../controller/config/front-door.ts';
import { FrontDoor, type FrontDoorRoute, type RouteTable } from '../frontdoor/router.ts';
import type { KubeClient } from '../kube/client.ts';
import { Informer } from '../kube/informer.ts';
import { KCTL_CLUSTER } from './crd.ts';
import { clusterDoorKey, clusterDoorNames, doorKey } from './door-keys.ts';
import { MANAGED_BY, olderFirst, ownedNames, POD_API_PORT, type KctlCluster } from './objects.ts';

export const MANAGEMENT_DOOR_DEFAULTS = {
  /** The port it listens on (in its pod; its Service maps it outward). */
  port: 8443,
  /** How often it looks for the door key Secret until it has it (the operator makes it). */
  keyEveryMs: 5_000,
  /** The first lists must arrive within this. */
  syncTimeoutMs: 60_000,
};

export interface ManagementDoorOptions {
  kube: KubeClient;
  domain: string;
  port?: number;
  /** Default every address. */
  address?: string;
  keyEveryMs?: number;
  syncTimeoutMs?: number;
}

interface ServiceObject {
  metadata: { name: string; namespace?: string };
  spec?: { clusterIP?: string };
}

type Watched<T> = T & { metadata: { name: string; namespace: string } };

export class ManagementDoorComponent implements Component, RouteTable {
  readonly name = 'front-door';
  private log!: Logger;
  private readonly o: Required<Omit<ManagementDoorOptions, 'address'>> & Pick<ManagementDoorOptions, 'address'>;
  private clusters!: Informer<Watched<KctlCluster>>;
  private services!: Informer<Watched<ServiceObject>>;
  private routes = new Map<string, FrontDoorRoute>();
  private key: Buffer | undefined;
  private keyTimer: NodeJS.Timeout | undefined;
  private door: FrontDoor | undefined;
  private conflicts = new Set<string>();

  constructor(o: ManagementDoorOptions) {
    this.o = { ...MANAGEMENT_DOOR_DEFAULTS, ...o };
  }

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
    const onError = (what: string) => (err: Error) =>
      this.log.warn({ err: messageOf(err) }, `watching ${what} failed; retrying`);
    this.clusters = new Informer(
      this.o.kube,
      `/apis/${KCTL_CLUSTER.group}/${KCTL_CLUSTER.version}/${KCTL_CLUSTER.plural}`,
      { watchTimeoutSeconds: 60 },
      () => this.rebuild(),
      onError('KctlClusters'),
    );
    this.services = new Informer(
      this.o.kube,
      '/api/v1/services',
      { watchTimeoutSeconds: 60, labelSelector: MANAGED_BY },
      () => this.rebuild(),
      onError("the clusters' Services"),
    );
  }

  async start(): Promise<void> {
    this.clusters.start();
    this.services.start();
    // The port opens once every route is known: a connection before that would find no name.
    const deadline = Date.now() + this.o.syncTimeoutMs;
    while (!(this.clusters.hasSynced && this.services.hasSynced)) {
      if (Date.now() > deadline)
        throw new UserError(
          `the front door could not list the KctlClusters and their Services within ${this.o.syncTimeoutMs / 1000} s (see the warnings above); check its kubeconfig and RBAC`,
        );
      await sleep(100);
    }
    await this.readKey();
    const door = new FrontDoor({ port: this.o.port, address: this.o.address }, this, this.log);
    await door.listen();
    this.door = door;
    this.log.info({ port: door.port, domain: this.o.domain }, 'front door open: hosted clusters answer to their names');
  }

  /** The door key; until the operator has made it, looked for again every keyEveryMs (the API names route meanwhile). */
  private async readKey(): Promise<void> {
    this.key = await doorKey(this.o.kube, false).catch((err: unknown) => {
      this.log.warn({ err: messageOf(err) }, 'could not read the door key Secret; retrying');
      return undefined;
    });
    if (this.key) return this.rebuild();
    this.keyTimer = setTimeout(() => void this.readKey(), this.o.keyEveryMs);
  }

  route(serverName: string): Promise<FrontDoorRoute | undefined> {
    return Promise.resolve(this.routes.get(serverName.toLowerCase()));
  }

  /** Every name of every cluster behind the door, from what the informers hold now. */
  private rebuild(): void {
    const routes = new Map<string, FrontDoorRoute>();
    const conflicts = new Set<string>();
    const behindDoor = [...this.clusters.store.values()].filter(
      (c) => c.spec.exposure?.type === 'FrontDoor' && !c.metadata.deletionTimestamp,
    );
    for (const c of olderFirst(behindDoor)) {
      const { name, namespace } = c.metadata;
      const cluster = `${namespace}/${name}`;
      const host = this.services.get(ownedNames(name).workload, namespace)?.spec?.clusterIP;
      const names = clusterDoorNames(c, this.o.domain);
      if (routes.has(names.api)) {
        conflicts.add(`${cluster} (${names.api} is ${routes.get(names.api)!.cluster}'s)`);
        continue;
      }
      if (!host || host === 'None') continue;
      routes.set(names.api, { cluster, endpoint: 'api', host, port: POD_API_PORT });
      if (!this.key) continue;
      const key = clusterDoorKey(this.key, c);
      for (const endpoint of ['konnectivity', 'join', 'nodeApi'] as const) {
        const serverName = names[endpoint];
        if (serverName) routes.set(serverName, { cluster, endpoint, host, port: HANDOFF_PORTS[endpoint], key });
      }
    }
    for (const c of conflicts)
      if (!this.conflicts.has(c)) this.log.warn({ cluster: c }, 'a front door name is taken by an older cluster');
    this.conflicts = conflicts;
    this.routes = routes;
  }

  async stop(): Promise<void> {
    clearTimeout(this.keyTimer);
    await this.door?.close();
    this.door = undefined;
    await Promise.all([this.clusters.stop(), this.services.stop()]);
  }
}
