// What a KctlCluster becomes on the management cluster, as plain objects (the operator applies
// them; reconcile.ts): its config in a Secret (it names the cluster's database password), its
// control plane as a Deployment of the kctl image, a Service in front of it, and a budget for
// drains. Each is owned by the KctlCluster, so deleting the object deletes them (Kubernetes'
// garbage collector); its CAs and database password are made apart (pki.ts, datastore.ts), once.
import { stringify } from 'yaml';
import { HANDOFF_PORTS } from '../controller/config/front-door.ts';
import { resourcePath } from '../kube/paths.ts';
import { MEMBER_NAME_ENV } from '../kube/controller-leases.ts';
import { kctlImageOf } from '../payload/images.ts';
import { KCTL_CLUSTER } from './crd.ts';

export interface KctlClusterSpec {
  version: string;
  replicas?: number;
  config?: Record<string, unknown>;
  datastore?: { postgres?: { secretName: string } };
  exposure?: {
    type?: 'NodePort' | 'LoadBalancer' | 'ClusterIP' | 'FrontDoor';
    address?: string;
    nodePort?: number;
    agentNodePort?: number;
  };
  resources?: { requests?: Record<string, string | number>; limits?: Record<string, string | number> };
  /** Tenant service accounts whose credentials are kept here as kubeconfig Secrets (credentials.ts). */
  serviceAccounts?: { namespace: string; name: string; secretName: string }[];
}

export interface KctlCluster {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    namespace: string;
    uid: string;
    creationTimestamp?: string;
    generation?: number;
    resourceVersion?: string;
    deletionTimestamp?: string;
    finalizers?: string[];
  };
  spec: KctlClusterSpec;
  status?: Record<string, unknown>;
}

/** The label on everything a cluster owns, its pods included: the cluster's name. */
export const CLUSTER_LABEL = 'kctl.dev/cluster';

/** What the operator makes carries this label; MANAGED_BY selects it. */
const MANAGED_BY_LABEL = ['app.kubernetes.io/managed-by', 'kctl-operator'] as const;
export const MANAGED_BY = MANAGED_BY_LABEL.join('=');

/** Clusters, the oldest first (the one that keeps a name two of them ask for); ties by namespace/name. */
export const olderFirst = <T extends KctlCluster>(clusters: T[]): T[] =>
  [...clusters].sort(
    (a, b) =>
      (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? '') ||
      `${a.metadata.namespace}/${a.metadata.name}`.localeCompare(`${b.metadata.namespace}/${b.metadata.name}`),
  );

/** Whether its nodes and admins reach it through the management cluster's front door (door.ts). */
export const behindDoor = (c: KctlCluster): boolean => c.spec.exposure?.type === 'FrontDoor';

/** The labels of a cluster's control-plane pods, and the selector of what selects them (Deployment, Service, budget). */
const podLabels = (c: KctlCluster) => ({ [CLUSTER_LABEL]: c.metadata.name });

/** The API's port inside the pod; a Service maps it outward. */
export const POD_API_PORT = 6443;
/** The konnectivity agent port inside the pod (a full cluster's). */
export const POD_AGENT_PORT = 8132;

/** Whether the cluster has nodes (spec.config.profile full, the default): it then serves agents too. */
export const isFull = (c: KctlCluster): boolean => c.spec.config?.profile !== 'api-only';

/**
 * A control-plane pod's requests when spec.resources names none: its memory as the bench measures
 * it with many pods of the image on one node (bench/last-run/operator.md, PSS), and a little CPU,
 * so the scheduler spreads clusters by what they use instead of stacking them on one node.
 */
export const DEFAULT_REQUESTS = {
  full: { cpu: '100m', memory: '320Mi' },
  'api-only': { cpu: '50m', memory: '200Mi' },
} as const;

/** The pod's resources: spec.resources, or the profile's default requests. */
export const resourcesOf = (c: KctlCluster): NonNullable<KctlClusterSpec['resources']> =>
  c.spec.resources ?? { requests: { ...DEFAULT_REQUESTS[isFull(c) ? 'full' : 'api-only'] } };

/**
 * The ports a cluster's clients use, which its pods listen on as well (one number everywhere:
 * the leases, tokens and kubeconfigs its pods write name what a client outside reaches): the node
 * ports of a NodePort Service, else the Service's own ports.
 */
export interface ClusterPorts {
  api: number;
  /** The konnectivity agent port; a full cluster's only. */
  agent?: number;
}

/** The names of what a cluster owns, in its namespace. */
export const ownedNames = (name: string) => ({
  workload: name,
  config: `${name}-config`,
  datastore: `${name}-datastore`,
  pki: `${name}-pki`,
  kubeconfig: `${name}-admin-kubeconfig`,
});

function ownerOf(c: KctlCluster) {
  return {
    apiVersion: `${KCTL_CLUSTER.group}/${KCTL_CLUSTER.version}`,
    kind: KCTL_CLUSTER.kind,
    name: c.metadata.name,
    uid: c.metadata.uid,
    controller: true,
    blockOwnerDeletion: true,
  };
}

const meta = (c: KctlCluster, name: string) => ({
  name,
  namespace: c.metadata.namespace,
  labels: { [MANAGED_BY_LABEL[0]]: MANAGED_BY_LABEL[1], ...podLabels(c) },
  ownerReferences: [ownerOf(c)],
});

/**
 * The hosted cluster's ClusterConfig: the object's spec.config with what the operator decides:
 * the address and ports its clients use (the exposure's), the management nodes' addresses as
 * further names, and its data source (the database the operator made for it).
 */
export function hostedConfig(
  c: KctlCluster,
  o: {
    address: string;
    sans: string[];
    dataSource: string;
    ports: ClusterPorts;
    /** The management cluster's front door, for a cluster behind it. */
    door?: { domain: string; host: string; port: number };
  },
): string {
  const spec = structuredClone(c.spec.config ?? {}) as Record<string, Record<string, unknown>>;
  const api = (spec.api ?? {}) as { sans?: string[] };
  spec.api = { ...api, address: o.address, port: o.ports.api, sans: [...new Set([...(api.sans ?? []), ...o.sans])] };
  if (o.ports.agent) spec.konnectivity = { ...(spec.konnectivity ?? {}), agentPort: o.ports.agent };
  const kine = (spec.storage?.kine ?? {}) as Record<string, unknown>;
  spec.storage = {
    ...(spec.storage ?? {}),
    type: 'kine',
    kine: { ...HOSTED_KINE_POOL, ...kine, dataSource: o.dataSource },
  };
  // The door is the management cluster's: its pods take its connections on their handoff ports.
  if (o.door)
    spec.frontDoor = {
      enabled: true,
      baseDomain: o.door.domain,
      name: c.metadata.name,
      address: o.door.host,
      port: o.door.port,
      external: { keyFile: DOOR_KEY_FILE },
    };
  (spec as Record<string, unknown>).gcPercent ??= HOSTED_GC_PERCENT;
  return stringify({
    apiVersion: 'kctl.dev/v1alpha1',
    kind: 'ClusterConfig',
    metadata: { name: c.metadata.name },
    spec,
  });
}

/** How long kubelet waits for a control-plane pod's /readyz (kubeadm's kube-apiserver probes wait as long). */
const READYZ_TIMEOUT_SECONDS = 15;

/** The Deployment of its control plane; `configHash` in the pod template rolls the pods when the config changes. */
export function deployment(c: KctlCluster, o: { ports: ClusterPorts; configHash: string }) {
  const door = handoffPorts(c);
  const names = ownedNames(c.metadata.name);
  const labels = podLabels(c);
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: meta(c, names.workload),
    spec: {
      replicas: c.spec.replicas ?? 1,
      selector: { matchLabels: labels },
      template: {
        metadata: { labels, annotations: { [CONFIG_HASH]: o.configHash } },
        spec: {
          terminationGracePeriodSeconds: 30,
          // Its pods on different nodes where the nodes allow: losing one node loses one replica.
          affinity: {
            podAntiAffinity: {
              preferredDuringSchedulingIgnoredDuringExecution: [
                { weight: 100, podAffinityTerm: { labelSelector: { matchLabels: labels }, topologyKey: HOSTNAME_KEY } },
              ],
            },
          },
          containers: [
            {
              name: 'kctl',
              image: kctlImageOf(c.spec.version),
              imagePullPolicy: 'IfNotPresent',
              args: ['controller', '--config', '/etc/kctl/kctl.yaml', '--shared-pki', '/etc/kctl/pki'],
              // Its pods share one address: each holds a lease of its own name (kctl controller --member-name),
              // so each konnectivity server counts the others and agents hold a stream to each.
              env: [{ name: MEMBER_NAME_ENV, valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } }],
              ports: [
                { name: 'api', containerPort: o.ports.api },
                ...(o.ports.agent ? [{ name: 'konnectivity', containerPort: o.ports.agent }] : []),
                ...door.map((p) => ({ name: p.name, containerPort: p.port })),
              ],
              // Ready once kube-apiserver says so (open to anonymous users): its bootstrap done, kube-system made.
              // A busy management node answers /readyz slower than kubelet's default one second: three
              // such misses would take a cluster's only pod out of its Service, and every client would be
              // refused while its API still serves. So a probe waits as long as kubeadm's own does.
              readinessProbe: {
                httpGet: { scheme: 'HTTPS', path: '/readyz', port: o.ports.api },
                periodSeconds: 2,
                timeoutSeconds: READYZ_TIMEOUT_SECONDS,
              },
              resources: resourcesOf(c),
              volumeMounts: [
                { name: 'config', mountPath: '/etc/kctl/kctl.yaml', subPath: 'kctl.yaml' },
                ...(behindDoor(c) ? [{ name: 'config', mountPath: DOOR_KEY_FILE, subPath: DOOR_KEY_ENTRY }] : []),
                { name: 'pki', mountPath: '/etc/kctl/pki', readOnly: true },
                // No volume on /var/lib/kctl: the image's staged components lie there, shared by
                // every pod of the image; what a pod writes there goes to its own layer.
              ],
            },
          ],
          volumes: [
            // The config names the cluster's own database role and password: a Secret.
            { name: 'config', secret: { secretName: names.config, defaultMode: 0o400 } },
            { name: 'pki', secret: { secretName: names.pki, defaultMode: 0o400 } },
          ],
        },
      },
    },
  };
}

const HOSTNAME_KEY = 'kubernetes.io/hostname';

/**
 * Its PodDisruptionBudget: a drain evicts one control-plane pod at a time, and the next only once
 * its replacement is ready, so a cluster of two or more replicas keeps its API through a drain.
 */
export function disruptionBudget(c: KctlCluster) {
  return {
    apiVersion: 'policy/v1',
    kind: 'PodDisruptionBudget',
    metadata: meta(c, ownedNames(c.metadata.name).workload),
    spec: { maxUnavailable: 1, selector: { matchLabels: podLabels(c) } },
  };
}

/** Where a pod behind the door reads its handoff key (an entry of its config Secret). */
export const DOOR_KEY_ENTRY = 'door.key';
const DOOR_KEY_FILE = `/etc/kctl/${DOOR_KEY_ENTRY}`;

/** A full cluster behind the door: the ports its pods take the door's connections on (the door's route targets). */
const handoffPorts = (c: KctlCluster) =>
  behindDoor(c) && isFull(c)
    ? [
        // Port names are 15 characters at most.
        { name: 'handoff-agent', port: HANDOFF_PORTS.konnectivity },
        { name: 'handoff-join', port: HANDOFF_PORTS.join },
        { name: 'handoff-nodeapi', port: HANDOFF_PORTS.nodeApi },
      ]
    : [];

/**
 * A hosted cluster's spec.gcPercent (the GOGC of its Go programs) unless its spec.config sets one.
 * Many pods share each management node, so memory counts most: the collector runs once a heap
 * grew a tenth beyond what it holds live. Measured (bench --operator --quick, against the 25 of
 * named clusters): a full pod beside four others 302 MiB instead of 318-326, kube-apiserver's
 * anonymous memory 128 MiB instead of 145; about the same idle CPU, and about 3 CPU-seconds more
 * at kube-apiserver's start (bench/HISTORY.md). A cluster with heavy API traffic sets
 * spec.config.gcPercent: 100.
 */
export const HOSTED_GC_PERCENT = 10;

/**
 * A hosted cluster's kine pool on the shared PostgreSQL unless its spec.config names one: kine
 * wants 10-15 connections under moderate load, and without a bound each cluster could hold any
 * number (20 idle), so a server's max_connections would cap how many clusters it serves.
 */
export const HOSTED_KINE_POOL = { maxOpenConnections: 15, maxIdleConnections: 5 };

/** The annotation on a control-plane pod naming its config's hash. */
export const CONFIG_HASH = 'kctl.dev/config-hash';

/**
 * The Service in front of it. With `ports` unknown (a NodePort Service's first apply), Kubernetes
 * picks the node ports the spec leaves open and the next apply points the pods' ports at them;
 * every later apply passes the ports the Service has, so its targets never point anywhere else.
 */
export function service(c: KctlCluster, ports?: ClusterPorts) {
  const exposure = c.spec.exposure?.type ?? 'NodePort';
  // Behind the door, the door reaches it at its ClusterIP: nothing outside needs a port of its own.
  const type = exposure === 'FrontDoor' ? 'ClusterIP' : exposure;
  const nodePorts = type === 'NodePort';
  // A node port the spec names wins over the one the Service has (the spec changed).
  const want = {
    api: (nodePorts ? c.spec.exposure?.nodePort : undefined) ?? ports?.api,
    agent: (nodePorts ? c.spec.exposure?.agentNodePort : undefined) ?? ports?.agent,
  };
  const port = (name: string, inPod: number, chosen: number | undefined) => {
    if (!nodePorts) return { name, port: inPod, targetPort: inPod };
    return { name, port: inPod, targetPort: chosen ?? inPod, ...(chosen ? { nodePort: chosen } : {}) };
  };
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: meta(c, ownedNames(c.metadata.name).workload),
    spec: {
      type,
      selector: podLabels(c),
      ports: [
        port('api', POD_API_PORT, want.api),
        ...(isFull(c) ? [port('konnectivity', POD_AGENT_PORT, want.agent)] : []),
        ...handoffPorts(c).map((p) => port(p.name, p.port, undefined)),
      ],
    },
  };
}

/** The path of Secret `name` in the cluster's namespace (of the namespace's Secrets without a name). */
export const secretPath = (c: KctlCluster, name?: string): string =>
  resourcePath({ apiVersion: 'v1', resource: 'secrets', namespace: c.metadata.namespace, name });

/** A Secret owned by the cluster. */
export function secret(c: KctlCluster, name: string, data: Record<string, Buffer | string>) {
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: meta(c, name),
    type: 'Opaque',
    data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, Buffer.from(v).toString('base64')])),
  };
}
