// ClusterConfig (apiVersion kctl.dev/v1alpha1), shaped like k0s's. Every field has a default,
// unknown fields are rejected, and a bad value names its path and what is expected.
import { readFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import { parseDocument, stringify } from 'yaml';
import { z } from 'zod';
import { cidrAddress, cidrContains } from '../../base/addresses.ts';
import { parseDuration } from '../../base/duration.ts';
import { errnoOf, messageOf, UserError } from '../../base/errors.ts';
import { MIN_LEAF_VALIDITY_MS } from '../../pki/index.ts';
import {
  absolutePath,
  backupSchedule,
  cel,
  CEL_DURATION,
  cidr,
  dnsLabel,
  duration,
  encryptedResource,
  extraArgs,
  hostOrIp,
  MAX,
  memoryLimit,
  port,
  trustedAgent,
  unique,
} from './fields.ts';
import { frontDoorProblem, frontDoorSchema } from './front-door.ts';
import { workerProfiles } from './worker-profiles.ts';
import { NETWORK_MODES, POD_NETWORK_RELAYS, VXLAN_DEFAULTS, WIREGUARD_DEFAULTS } from '../../kube/pod-network.ts';

export const clusterConfigSchema = z.strictObject({
  apiVersion: z.literal('kctl.dev/v1alpha1').default('kctl.dev/v1alpha1'),
  kind: z.literal('ClusterConfig').default('ClusterConfig'),
  metadata: z.strictObject({ name: z.string().default('kctl') }).prefault({}),
  spec: z
    .strictObject({
      /**
       * full: a control plane for worker nodes. api-only: the Kubernetes API alone (storage,
       * kube-apiserver, a trimmed kube-controller-manager) for CRDs and operators, with no nodes.
       */
      profile: z.enum(['full', 'api-only']).default('full'),
      api: z
        .strictObject({
          address: z
            .string()
            .max(MAX.address)
            .refine((s) => isIP(s) !== 0, {
              message: 'expected an IP address (the address workers use to reach this controller)',
            })
            .meta(cel('isIP(self)', 'expected an IP address (the address workers use to reach this controller)'))
            .optional(),
          port: port(6443),
          /** Where joining controllers fetch the shared keys (kctl controller --token-file). */
          joinPort: port(9443),
          sans: z.array(hostOrIp).max(MAX.list).default([]),
          /** kube-apiserver's audit log, <data-dir>/audit/audit.log (controller/encryption/audit.ts has the default policy). */
          audit: z
            .strictObject({
              enabled: z.boolean().default(true),
              /** An audit.k8s.io/v1 Policy of your own instead of kctl's default. */
              policyFile: z.string().min(1).optional(),
              /** Megabytes a log file reaches before it is rotated. */
              maxSize: z.number().int().min(1).max(100_000).default(100),
              /** Rotated files kept beside the current one; older ones are deleted. */
              maxBackups: z.number().int().min(1).max(1000).default(5),
            })
            .prefault({}),
          /**
           * Encryption at rest: the resources kube-apiserver stores encrypted (secretbox, key in the PKI
           * dir). Empty: nothing is encrypted any more; objects an earlier setting encrypted stay readable
           * and are written back in plain text.
           */
          encryption: z
            .strictObject({
              resources: z
                .array(encryptedResource)
                .max(MAX.list)
                .meta({ 'x-kubernetes-list-type': 'set' })
                .default(['secrets'])
                .refine(unique, 'expected each resource once'),
            })
            .prefault({}),
          memoryLimit,
          extraArgs,
        })
        .prefault({}),
      konnectivity: z
        .strictObject({
          agentPort: port(8132),
          adminPort: port(8133),
          trustedAgents: z.array(trustedAgent).max(MAX.list).default([]),
          /** How kube-apiserver speaks to the in-process server: one CONNECT per dial, or a gRPC stream per dial. */
          proxyProtocol: z.enum(['HTTPConnect', 'GRPC']).default('HTTPConnect'),
          /** Connections to agentPort that have not authenticated yet, at most; at the cap a new one closes the oldest. */
          maxUnauthenticatedAgents: z.number().int().min(1).max(65536).default(256),
        })
        .prefault({}),
      storage: z
        .strictObject({
          type: z.enum(['etcd', 'kine']).optional(),
          etcd: z
            .strictObject({
              clientPort: port(2379),
              peerPort: port(2380),
              /** This controller's etcd member name; default the host name. */
              memberName: z.string().regex(dnsLabel, 'expected a name such as ctrl-1').optional(),
              extraArgs,
            })
            .prefault({}),
          kine: z
            .strictObject({
              dataSource: z
                .string()
                .max(MAX.url)
                .refine((s) => /^(sqlite|postgres|mysql|nats|https?):\/\//.test(s), {
                  message: 'expected a kine data source URL (sqlite://, postgres://, mysql://)',
                })
                .meta(
                  cel(
                    "self.matches('^(sqlite|postgres|mysql|nats|https?)://')",
                    'expected a kine data source URL (sqlite://, postgres://, mysql://)',
                  ),
                )
                .optional(),
              /**
               * kine's connection pool on a database server (kine's defaults: no bound on open
               * connections, 20 kept idle): many clusters on one PostgreSQL need a bound each.
               */
              maxOpenConnections: z.number().int().min(1).max(1000).optional(),
              /** Connections kept open while idle; 0 keeps none. */
              maxIdleConnections: z.number().int().min(0).max(1000).optional(),
            })
            .prefault({}),
        })
        .prefault({}),
      network: z
        .strictObject({
          podCIDR: cidr('10.244.0.0/16'),
          serviceCIDR: cidr('10.96.0.0/12'),
          clusterDomain: z
            .string()
            .regex(/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/, 'expected a DNS domain such as cluster.local')
            .default('cluster.local'),
          clusterDNS: z
            .string()
            .max(MAX.address)
            .refine((s) => isIP(s) !== 0, {
              message: 'expected an IP address in spec.network.serviceCIDR (default: its 10th address)',
            })
            .meta(cel('isIP(self)', 'expected an IP address in spec.network.serviceCIDR (default: its 10th address)'))
            .optional(),
          /**
           * How pod traffic crosses between nodes (kube/pod-network.ts). Unset: what the cluster runs
           * already, and routes for a new one.
           */
          mode: z.enum(NETWORK_MODES).optional(),
          vxlan: z
            .strictObject({
              vni: z.number().int().min(1).max(16_777_215).default(VXLAN_DEFAULTS.vni),
              port: port(VXLAN_DEFAULTS.port),
            })
            .prefault({}),
          wireguard: z.strictObject({ port: port(WIREGUARD_DEFAULTS.port) }).prefault({}),
          /**
           * NetworkPolicy enforced on every worker (nftables); false: policies are stored and ignored.
           * Unset: what the cluster does already; on for a new cluster.
           */
          policy: z.boolean().optional(),
          /**
           * wireguard mode: two nodes that cannot reach each other and have no relay node send their
           * (encrypted) WireGuard packets through the controllers (konnectivity/server/datagrams.ts).
           * Set it on every controller.
           */
          relay: z.enum(POD_NETWORK_RELAYS).default('none'),
        })
        .prefault({}),
      addons: z
        .strictObject({
          coredns: z
            .strictObject({ enabled: z.boolean().default(true), replicas: z.number().int().min(1).max(10).default(2) })
            .prefault({}),
          metricsServer: z.strictObject({ enabled: z.boolean().default(true) }).prefault({}),
        })
        .prefault({}),
      /** Scheduled backups (controller/backups/backup-schedule.ts); no schedule: none. */
      backup: z
        .strictObject({
          /** The interval between backups, e.g. 6h. */
          schedule: backupSchedule.optional(),
          /** How many of kctl's archives to keep in path; older ones are deleted after a good backup. */
          retention: z.number().int().min(1).max(1000).default(7),
          /** Where archives go; default <data-dir>/backups. */
          path: absolutePath.optional(),
          /** Seal every archive with this key (32 random bytes, base64, mode 0600). */
          encryptionKeyFile: absolutePath.optional(),
        })
        .prefault({}),
      /** How `kctl upgrade plan` rolls the cluster (copied into each plan, which every node reads). */
      upgrade: z
        .strictObject({
          /** Each node cordons and drains itself (PodDisruptionBudgets respected) before it swaps its executable. */
          drain: z.boolean().default(true),
          /** How long a node's drain may take; past it, the node's upgrade fails and the plan stops. */
          drainTimeout: duration('expected a duration of at least 1s, such as 5m').default('5m'),
          /** At most this many nodes upgrade at once. */
          maxUnavailable: z.number().int().min(1).max(1000).default(1),
          /** A controller or node not ready at the new version within this rolls back to its previous executable. */
          readyTimeout: duration('expected a duration of at least 1s, such as 5m').default('5m'),
        })
        .prefault({}),
      pki: z
        .strictObject({
          /** The lifetime of every leaf certificate and component kubeconfig (the renewer renews them while kctl runs). */
          leafValidity: z
            .string()
            .max(MAX.duration)
            .refine((s) => (parseDuration(s, { days: true }) ?? 0) >= MIN_LEAF_VALIDITY_MS, {
              message: 'expected a duration of at least 10m, such as 8760h or 365d',
            })
            .meta(cel(CEL_DURATION, 'expected a duration of at least 10m, such as 8760h or 365d'))
            .default('8760h'),
        })
        .prefault({}),
      /**
       * GOGC of the Go components of the control plane (kube-apiserver, the datastore,
       * kube-scheduler, kube-controller-manager), whose heaps grow with the cluster's objects: 25
       * lets a heap grow a quarter of its live size before a collection, Go's own 100 a whole.
       * Default 25 for a named full cluster (many share one host), Go's default otherwise.
       */
      gcPercent: z.number().int().min(10).max(1000).optional(),
      scheduler: z.strictObject({ port: port(10259), extraArgs }).prefault({}),
      controllerManager: z.strictObject({ port: port(10257), memoryLimit, extraArgs }).prefault({}),
      frontDoor: frontDoorSchema,
      /** kubelet settings by profile name, chosen with `kctl worker --profile NAME` (`default`: workers without one). */
      workerProfiles,
    })
    .prefault({}),
});

export type ClusterConfigInput = z.input<typeof clusterConfigSchema>;
type Parsed = z.output<typeof clusterConfigSchema>;

/** The config with every default filled in, including the ones that depend on flags and the host. */
export interface ClusterConfig extends Parsed {
  spec: Parsed['spec'] & {
    api: Parsed['spec']['api'] & { address: string };
    storage: Parsed['spec']['storage'] & { type: 'etcd' | 'kine' };
    network: Parsed['spec']['network'] & { clusterDNS: string };
    frontDoor: Parsed['spec']['frontDoor'] & { name: string };
  };
}

export interface ConfigFlags {
  single?: boolean;
  storage?: 'etcd' | 'kine';
  /** kctl controller --api-only: spec.profile api-only. */
  apiOnly?: boolean;
  /** kctl controller --name: a tenant (api-only unless spec.profile: full), whose ports kctl picks and records. */
  tenantName?: string;
}

/**
 * A named full cluster's spec.gcPercent unless its config sets one. With ten clusters on a host it
 * cut each cluster's kube-apiserver from about 200 MiB (Go's 100) to 147 (50: 169), at the same
 * idle CPU; a start costs kube-apiserver about a third more CPU.
 */
export const TENANT_GC_PERCENT = 25;

/** Ports a tenant (--name) gets from --port-range; a config must not set them. */
const TENANT_PORT_FIELDS = [
  ['spec', 'api', 'port'],
  ['spec', 'api', 'joinPort'],
  ['spec', 'konnectivity', 'agentPort'],
  ['spec', 'konnectivity', 'adminPort'],
  ['spec', 'scheduler', 'port'],
  ['spec', 'controllerManager', 'port'],
  ['spec', 'storage', 'etcd', 'clientPort'],
  ['spec', 'storage', 'etcd', 'peerPort'],
];

/** The value at `path` in the raw (unparsed) config, to tell a field set on purpose from its default. */
function rawField(input: unknown, path: string[]): unknown {
  let v: unknown = input;
  for (const k of path) v = v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined;
  return v;
}

/** First non-internal IPv4 address: what k0s also picks when no address is configured. */
export function defaultAddress(): string {
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return '127.0.0.1';
}

function describeIssue(issue: z.core.$ZodIssue): string {
  const path = issue.path.length ? issue.path.join('.') : '(top level)';
  if (issue.code === 'unrecognized_keys')
    return `${path}${path === '(top level)' ? '' : ''}: unknown field(s) ${issue.keys.map((k) => `"${k}"`).join(', ')}`;
  return `${path}: ${issue.message}`;
}

export function parseConfig(input: unknown, source: string, flags: ConfigFlags = {}): ClusterConfig {
  const r = clusterConfigSchema.safeParse(input ?? {});
  if (!r.success) {
    throw new UserError(`invalid config ${source}: ${r.error.issues.map(describeIssue).join('; ')}`);
  }
  const c = r.data;
  if (flags.tenantName !== undefined) {
    for (const path of TENANT_PORT_FIELDS)
      if (rawField(input, path) !== undefined)
        throw new UserError(
          `invalid config ${source}: ${path.join('.')}: a tenant (--name) gets its ports from --port-range, chosen on its first start and kept; remove the field`,
        );
  }
  // A tenant is api-only unless its config asks for a full cluster (spec.profile: full).
  const tenantProfile = rawField(input, ['spec', 'profile']) === 'full' ? 'full' : 'api-only';
  const profile = flags.apiOnly ? 'api-only' : flags.tenantName !== undefined ? tenantProfile : c.spec.profile;
  if (profile === 'api-only')
    for (const addon of ['coredns', 'metricsServer'])
      if (rawField(input, ['spec', 'addons', addon, 'enabled']) === true)
        throw new UserError(
          `invalid config ${source}: spec.addons.${addon}.enabled: an api-only control plane has no nodes to run add-ons on; remove it, or use spec.profile: full`,
        );
  const apiOnly = profile === 'api-only';
  // An API-only control plane is small and alone: kine on SQLite unless told otherwise.
  const storageType = flags.storage ?? c.spec.storage.type ?? (flags.single || apiOnly ? 'kine' : 'etcd');
  const gcPercent =
    c.spec.gcPercent ?? (flags.tenantName !== undefined && profile === 'full' ? TENANT_GC_PERCENT : undefined);
  const frontDoorName = c.spec.frontDoor.name ?? flags.tenantName ?? c.metadata.name;
  const doorProblem = frontDoorProblem(c.spec, frontDoorName);
  if (doorProblem) throw new UserError(`invalid config ${source}: ${doorProblem}`);
  const { serviceCIDR } = c.spec.network;
  const clusterDNS = c.spec.network.clusterDNS ?? cidrAddress(serviceCIDR, 10);
  if (!cidrContains(serviceCIDR, clusterDNS))
    throw new UserError(
      `invalid config ${source}: spec.network.clusterDNS: ${clusterDNS} is outside spec.network.serviceCIDR ${serviceCIDR}; pick an address inside it`,
    );
  return {
    ...c,
    spec: {
      ...c.spec,
      profile,
      gcPercent,
      api: { ...c.spec.api, address: c.spec.api.address ?? defaultAddress() },
      addons: apiOnly
        ? { coredns: { ...c.spec.addons.coredns, enabled: false }, metricsServer: { enabled: false } }
        : c.spec.addons,
      storage: { ...c.spec.storage, type: storageType },
      network: { ...c.spec.network, clusterDNS },
      frontDoor: { ...c.spec.frontDoor, name: frontDoorName },
    },
  };
}

export async function loadConfig(file: string | undefined, flags: ConfigFlags = {}): Promise<ClusterConfig> {
  if (!file) return parseConfig({}, '(defaults)', flags);
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new UserError(`cannot read config ${file}: ${errnoOf(err) ?? messageOf(err)}`);
  }
  const doc = parseDocument(text);
  if (doc.errors.length)
    throw new UserError(`config ${file} is not valid YAML: ${doc.errors[0]!.message.split('\n')[0]}`);
  return parseConfig(doc.toJS(), file, flags);
}

export function defaultConfigYaml(): string {
  const c = parseConfig({}, '(defaults)');
  return stringify(c);
}

/** spec.pki.leafValidity in milliseconds (validated when the config was parsed). */
export function leafValidityMs(cfg: ClusterConfig): number {
  return parseDuration(cfg.spec.pki.leafValidity, { days: true })!;
}
