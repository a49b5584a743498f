// Which controllers are alive, for both roles: every kctl controller holds a Lease (label
// kctl.dev/controller=true) that names its API server URL and its konnectivity agent address, and
// renews it every 10 s (valid 30 s); it deletes it when it stops. It writes the same lease twice:
// in kube-system, where controllers read each other (older kctl controllers write and read only
// there), and in kctl-controllers, a namespace that holds nothing else, where nodes read it. Controllers count the live leases as their konnectivity server count; agents dial
// every live controller's konnectivity address. No load balancer, no static count in a file.
// The lease also lists the agents its konnectivity server holds, so any controller's `kctl
// status` can show, per agent, every controller it has a stream to.
import type { Release } from '../base/version.ts';
import { parseFrontDoorEndpoint, splitHostPort, urlHost, type FrontDoorEndpoint } from '../base/addresses.ts';
import type { KubeClient, KubeManifest } from './client.ts';
import { Informer } from './informer.ts';
import {
  parseMemberUpgrade,
  parseReleaseString,
  releaseString,
  UPGRADE_ANNOTATION,
  VERSION_ANNOTATION,
  type MemberUpgrade,
} from './upgrade-plan.ts';

export const CONTROLLER_LEASE_LABEL = 'kctl.dev/controller';
/** Where controllers read each other's leases (and kctl's other leases live): every kctl controller writes here. */
export const LEASE_NAMESPACE = 'kube-system';
export const LEASES_PATH = leasesPath(LEASE_NAMESPACE);
/**
 * Where nodes read the controllers' leases: a namespace with nothing else in it, so a node's read
 * right covers these leases and no other (RBAC's resourceNames cannot name, for list and watch, a
 * set that changes as controllers come and go).
 */
export const NODE_LEASE_NAMESPACE = 'kctl-controllers';
export const NODE_LEASES_PATH = leasesPath(NODE_LEASE_NAMESPACE);
/** The first kctl whose nodes read NODE_LEASE_NAMESPACE; nodes of an older kctl read kube-system's leases. */
export const NODE_LEASES_SINCE = '0.2.0';
const API_ANNOTATION = 'kctl.dev/api-server';
const KONNECTIVITY_ANNOTATION = 'kctl.dev/konnectivity';
const AGENTS_ANNOTATION = 'kctl.dev/agents';
/** The names of the encryption keys its kube-apiserver has loaded, in order (names only, never a key). */
const ENCRYPTION_ANNOTATION = 'kctl.dev/encryption-keys';
/** On a controller's lease and on a Node: the cluster CA trust bundle it uses (bundleHash of ca.crt). */
export const CA_BUNDLE_ANNOTATION = 'kctl.dev/ca-bundle';
/** Where this controller serves kctl executables to nodes and controllers (its join endpoint's https URL). */
const EXECUTABLES_ANNOTATION = 'kctl.dev/executables';
/** Where nodes reach this controller through its host's front door (JSON: FrontDoorEndpoint). */
const FRONT_DOOR_ANNOTATION = 'kctl.dev/front-door';
/** Annotations share a 256 KiB budget per object: past this many agents the list is cut (and says so). */
export const MAX_LISTED_AGENTS = 5000;
export const LEASE_DURATION_S = 30;
export const RENEW_EVERY_MS = 10_000;

export interface LiveController {
  name: string;
  /** https URL of its kube-apiserver. */
  apiServer: string;
  /** host:port of its konnectivity agent endpoint. */
  konnectivity: string;
  /** The agent ids its konnectivity server held at its last renewal (sorted; at most MAX_LISTED_AGENTS). */
  agents: string[];
  /** How many agents it held, when more than were listed. */
  agentsTotal?: number;
  /** The encryption key names its kube-apiserver has loaded (comma-separated, first encrypts); absent until known. */
  encryptionKeys?: string;
  /** The cluster CA trust bundle it uses (a short hash of ca.crt; see kctl pki rotate-ca); absent until known. */
  caBundle?: string;
  /** The release it runs; absent on a lease written by a kctl from before upgrades. */
  release?: Release;
  /** Its upgrade, when it has one under way or finished. */
  upgrade?: MemberUpgrade;
  /** https URL of its join endpoint, which serves kctl executables. */
  executables?: string;
  /** Its host's front door (spec.frontDoor): nodes reach the same endpoints there, by name, on one port. */
  frontDoor?: FrontDoorEndpoint;
}

function parseFrontDoor(text: string | undefined): FrontDoorEndpoint | undefined {
  if (!text) return undefined;
  try {
    return parseFrontDoorEndpoint(JSON.parse(text));
  } catch {
    return undefined;
  }
}

export interface Lease {
  metadata: { name: string; resourceVersion?: string; annotations?: Record<string, string> };
  spec?: { holderIdentity?: string; leaseDurationSeconds?: number; renewTime?: string };
}

function leasesPath(namespace: string): string {
  return `/apis/coordination.k8s.io/v1/namespaces/${namespace}/leases`;
}

/** The lease name of a controller: from its advertised address, which is unique in a cluster. */
export function controllerLeaseName(address: string): string {
  return `kctl-controller-${address.toLowerCase().replace(/[^a-z0-9]+/g, '-')}`;
}

/** The environment variable that sets kctl controller --member-name (a pod's own name, from the downward API). */
export const MEMBER_NAME_ENV = 'KCTL_MEMBER_NAME';

/**
 * This controller's lease name: from its member name when it has one (kctl controller
 * --member-name: pods of one hosted cluster share one address), else from its address.
 */
export function memberLeaseName(address: string, member?: string): string {
  return controllerLeaseName(member ?? address);
}

/** A MicroTime, as the coordination API wants it. */
export function microTime(d: Date): string {
  return d.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

export function controllerLease(
  name: string,
  c: Omit<LiveController, 'name' | 'agentsTotal'>,
  now = new Date(),
  namespace = LEASE_NAMESPACE,
): KubeManifest {
  const agents = [...c.agents].sort();
  const listed = agents.slice(0, MAX_LISTED_AGENTS).join(',');
  return {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: {
      name,
      namespace,
      labels: { [CONTROLLER_LEASE_LABEL]: 'true' },
      annotations: {
        [API_ANNOTATION]: c.apiServer,
        [KONNECTIVITY_ANNOTATION]: c.konnectivity,
        [AGENTS_ANNOTATION]: agents.length > MAX_LISTED_AGENTS ? `${listed};total=${agents.length}` : listed,
        ...(c.encryptionKeys ? { [ENCRYPTION_ANNOTATION]: c.encryptionKeys } : {}),
        ...(c.caBundle ? { [CA_BUNDLE_ANNOTATION]: c.caBundle } : {}),
        ...(c.release ? { [VERSION_ANNOTATION]: releaseString(c.release) } : {}),
        ...(c.upgrade ? { [UPGRADE_ANNOTATION]: JSON.stringify(c.upgrade) } : {}),
        ...(c.executables ? { [EXECUTABLES_ANNOTATION]: c.executables } : {}),
        ...(c.frontDoor ? { [FRONT_DOOR_ANNOTATION]: JSON.stringify(c.frontDoor) } : {}),
      },
    },
    spec: { holderIdentity: name, leaseDurationSeconds: LEASE_DURATION_S, renewTime: microTime(now) },
  };
}

const optional = <K extends string, V>(key: K, v: V | undefined): Partial<Record<K, V>> =>
  v === undefined ? {} : ({ [key]: v } as Record<K, V>);

/** The hosts a live controller is reached at (its API server, konnectivity port, front door): no node's address. */
export function controllerHosts(c: LiveController): string[] {
  const door = c.frontDoor ? (splitHostPort(c.frontDoor.address)?.host ?? '') : '';
  return [...new Set([urlHost(c.apiServer), splitHostPort(c.konnectivity)?.host ?? '', door])].filter(Boolean);
}

/** The controllers whose leases have not expired at `now`, by name. */
export function liveControllers(leases: Iterable<Lease>, now = Date.now()): LiveController[] {
  const out: LiveController[] = [];
  for (const l of leases) {
    const renewed = Date.parse(l.spec?.renewTime ?? '');
    const duration = (l.spec?.leaseDurationSeconds ?? LEASE_DURATION_S) * 1000;
    const a = l.metadata.annotations ?? {};
    if (!Number.isFinite(renewed) || renewed + duration <= now || !a[API_ANNOTATION] || !a[KONNECTIVITY_ANNOTATION])
      continue;
    const [listed = '', total] = (a[AGENTS_ANNOTATION] ?? '').split(';total=');
    const agents = listed.split(',').filter(Boolean);
    out.push({
      name: l.metadata.name,
      apiServer: a[API_ANNOTATION],
      konnectivity: a[KONNECTIVITY_ANNOTATION],
      agents,
      ...(total ? { agentsTotal: Number(total) } : {}),
      ...(a[ENCRYPTION_ANNOTATION] ? { encryptionKeys: a[ENCRYPTION_ANNOTATION] } : {}),
      ...(a[CA_BUNDLE_ANNOTATION] ? { caBundle: a[CA_BUNDLE_ANNOTATION] } : {}),
      ...optional('release', parseReleaseString(a[VERSION_ANNOTATION])),
      ...optional('upgrade', parseMemberUpgrade(a[UPGRADE_ANNOTATION])),
      ...(a[EXECUTABLES_ANNOTATION] ? { executables: a[EXECUTABLES_ANNOTATION] } : {}),
      ...optional('frontDoor', parseFrontDoor(a[FRONT_DOOR_ANNOTATION])),
    });
  }
  return out.sort((x, y) => x.name.localeCompare(y.name));
}

/**
 * Watches the controller leases and tells `onChange` the live set whenever it changes: on
 * events, and on a timer, because a lease expiring produces no event.
 */
export class ControllerLeaseWatch {
  private readonly informer: Informer<Lease>;
  private timer: NodeJS.Timeout | undefined;
  private last = '';

  constructor(
    kube: KubeClient,
    private readonly onChange: (live: LiveController[]) => void,
    private readonly onError?: (err: Error) => void,
    path = LEASES_PATH,
  ) {
    this.informer = new Informer<Lease>(
      kube,
      path,
      { labelSelector: `${CONTROLLER_LEASE_LABEL}=true` },
      () => this.check(),
      onError,
    );
  }

  get synced(): boolean {
    return this.informer.hasSynced;
  }

  live(): LiveController[] {
    return liveControllers(this.informer.store.values());
  }

  start(): void {
    this.informer.start();
    this.timer = setInterval(() => this.check(), 2_000);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.informer.stop();
  }

  private check(): void {
    if (!this.informer.hasSynced) return;
    const live = this.live();
    const key = followKey(live);
    if (key === this.last) return;
    this.last = key;
    this.onChange(live);
  }
}

/**
 * What the followers of the live controllers act on, as one comparable string: each one's
 * addresses and its front door (the node-local address pods use included). Addresses only: agents
 * coming and going change no controller's or worker's course (status reads live()).
 */
export function followKey(live: LiveController[]): string {
  return live
    .map((c) => `${c.name}=${c.apiServer},${c.konnectivity},${c.frontDoor ? JSON.stringify(c.frontDoor) : ''}`)
    .join(';');
}

/** Per agent, the controllers (lease names) whose konnectivity server holds a stream from it. */
export function agentServers(live: LiveController[]): { agent: string; servers: string[] }[] {
  const byAgent = new Map<string, string[]>();
  for (const c of live) for (const a of c.agents) byAgent.set(a, [...(byAgent.get(a) ?? []), c.name]);
  return [...byAgent]
    .sort(([x], [y]) => x.localeCompare(y))
    .map(([agent, servers]) => ({ agent, servers: servers.sort() }));
}
