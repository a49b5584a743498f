// spec.frontDoor: one TLS port shared by every cluster on a controller host (src/frontdoor/), and
// the names this cluster answers to there.
import { isIP, isIPv4 } from 'node:net';
import { cidrContains } from '../../base/addresses.ts';
import { specialRange } from '../../base/ownership.ts';
import { z } from 'zod';

/** spec.frontDoor.nodeLocalAddress's default. */
export const NODE_LOCAL_ADDRESS = '198.18.0.1';

/** Where an external door hands this controller its nodes' connections (spec.frontDoor.external.handoffPorts' defaults). */
export const HANDOFF_PORTS = { konnectivity: 8141, join: 8142, nodeApi: 8143 } as const;

const port = (d: number) => z.number().int().min(1).max(65535).default(d);
const UNSPECIFIED = new Set(['0.0.0.0', '::']);

/** A DNS domain of two labels or more: the one every cluster name at a door lives under. */
export const DOOR_DOMAIN = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$/;

/** One DNS label: a cluster's name in front of spec.frontDoor.baseDomain. */
export const FRONT_DOOR_NAME = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/**
 * A client reaches this cluster's API as <name>.<baseDomain>, its konnectivity server and join
 * endpoint as konnectivity.<name>.<baseDomain> and join.<name>.<baseDomain>, routed by the server
 * name it sends (SNI; ALPN would not tell clusters apart, and kube-apiserver and agents both speak h2).
 */
export const frontDoorSchema = z
  .strictObject({
    enabled: z.boolean().default(false),
    port: z.number().int().min(1).max(65535).default(443),
    /** The address it listens on; default every address. */
    address: z
      .string()
      .refine((s) => isIP(s) !== 0, { message: 'expected an IP address' })
      .optional(),
    baseDomain: z.string().regex(DOOR_DOMAIN, 'expected a DNS domain such as clusters.example.com').optional(),
    /** This cluster's name under baseDomain; default a tenant's --name, else metadata.name. */
    name: z.string().regex(FRONT_DOOR_NAME, 'expected a DNS label such as alpha').optional(),
    /**
     * The address every node serves the API on for its pods (a full cluster's): the kubernetes
     * Service's endpoint, on the loopback device of each node. Not routed anywhere, so pods need no
     * route to a controller host; an Endpoints address may not be loopback or link-local, hence a
     * benchmarking-range default (RFC 2544), which no site is likely to use.
     */
    nodeLocalAddress: z
      .string()
      .refine((s) => isIPv4(s) && specialRange(s) === undefined, {
        message: 'expected an IPv4 address that is not loopback, link-local, multicast or unspecified',
      })
      .default(NODE_LOCAL_ADDRESS),
    /**
     * The door is the only way in: kube-apiserver, the agent port and the join endpoint listen on
     * loopback alone (the door reaches them there), so the host's one open port is the door's.
     * For once every node is on the door (kctl status names those still on the direct agent port).
     */
    only: z.boolean().default(false),
    /**
     * The door is not this host's: another program (`kctl operator door` on a management cluster)
     * listens on address:port and hands this controller its nodes' connections on the handoff
     * ports, each starting with a PROXY v2 header carrying the key in keyFile. This controller
     * then opens no door of its own and joins no host registry.
     */
    external: z
      .strictObject({
        keyFile: z.string().startsWith('/', 'expected an absolute path'),
        handoffPorts: z
          .strictObject({
            konnectivity: port(HANDOFF_PORTS.konnectivity),
            join: port(HANDOFF_PORTS.join),
            nodeApi: port(HANDOFF_PORTS.nodeApi),
          })
          .prefault({}),
      })
      .optional(),
  })
  .refine((f) => !f.enabled || f.baseDomain !== undefined, {
    message: 'set the domain the cluster names live under, such as clusters.example.com',
    path: ['baseDomain'],
  })
  .refine((f) => !f.external || (f.address !== undefined && !UNSPECIFIED.has(f.address)), {
    message: "an external door needs the address nodes reach it at (a management node's, a load balancer's)",
    path: ['address'],
  })
  .refine((f) => !f.external || !f.only, {
    message: 'an external door reaches this controller on its own addresses; remove only',
    path: ['only'],
  })
  .refine((f) => f.enabled || !f.only, {
    message:
      'only closes the ports beside the front door; turn the door on (spec.frontDoor.enabled: true) or remove only',
    path: ['only'],
  })
  .prefault({});

/** The names a client sends to reach this cluster through the front door. */
export interface FrontDoorNames {
  /** kube-apiserver: <name>.<baseDomain>, what admins and kubeconfigs use. */
  api: string;
  /** The konnectivity server's agent port and the join endpoint (a full cluster's; nodes dial them). */
  konnectivity?: string;
  join?: string;
  /** A full cluster's node API tunnel: nodes' API connections that carry no server name, in TLS with the node's certificate. */
  nodeApi?: string;
}

/**
 * This cluster's front-door names (none when it has no front door). The nodes' endpoints are fixed
 * sub-names of the API's, one label deeper, so no cluster's API name can be another's endpoint.
 */
export function frontDoorNames(cfg: {
  spec: { profile: string; frontDoor: z.infer<typeof frontDoorSchema> & { name: string } };
}): FrontDoorNames | undefined {
  const f = cfg.spec.frontDoor;
  if (!f.enabled || f.baseDomain === undefined) return undefined;
  return doorNames(f.name, f.baseDomain, cfg.spec.profile !== 'api-only');
}

/** The names of cluster `name` under `domain`; a cluster with nodes (`full`) has the nodes' endpoints too. */
export function doorNames(name: string, domain: string, full: boolean): FrontDoorNames {
  const api = `${name}.${domain}`;
  if (!full) return { api };
  return { api, konnectivity: `konnectivity.${api}`, join: `join.${api}`, nodeApi: `node-api.${api}` };
}

/**
 * What is wrong with an enabled front door beyond its own fields, or undefined: the cluster's name
 * there (`name`, from a tenant's --name or metadata.name when not set) must be one DNS label, and
 * the node-local address must be outside the cluster's networks.
 */
export function frontDoorProblem(
  spec: { frontDoor: z.infer<typeof frontDoorSchema>; network: { serviceCIDR: string; podCIDR: string } },
  name: string,
): string | undefined {
  if (!spec.frontDoor.enabled) return undefined;
  if (!FRONT_DOOR_NAME.test(name))
    return `metadata.name "${name}" cannot be a front door name (one DNS label: lower-case letters, digits, '-'); set spec.frontDoor.name`;
  const address = spec.frontDoor.nodeLocalAddress;
  for (const field of ['serviceCIDR', 'podCIDR'] as const)
    if (cidrContains(spec.network[field], address))
      return `spec.frontDoor.nodeLocalAddress: ${address} is inside spec.network.${field} ${spec.network[field]}; pick an address outside the cluster's networks`;
  return undefined;
}
