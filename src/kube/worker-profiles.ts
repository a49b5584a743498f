// Worker profiles (k0s's shape): named sets of kubelet configuration fields the controllers publish
// from spec.workerProfiles into one ConfigMap, kube-system/kctl-worker-profiles, one key per profile
// (its fields as JSON). A worker started with --profile NAME lays that profile over kctl's own
// kubelet configuration, before kubelet first starts and live after (kubelet restarts on a change);
// a worker without --profile follows the profile named `default` when there is one. Nodes and worker
// join tokens may read this one object (kubelet's first start comes before the node has its
// certificate); nothing a node writes reaches it.
import type { KubeManifest } from './client.ts';
import { KUBELET_CONFIG_SHAPE } from './gen/kubelet-config-shape.ts';
import { shapeProblems, type ShapeProblem } from './kubelet-shape.ts';

export const WORKER_PROFILES_NAMESPACE = 'kube-system';
export const WORKER_PROFILES_NAME = 'kctl-worker-profiles';
export const WORKER_PROFILES_COLLECTION = `/api/v1/namespaces/${WORKER_PROFILES_NAMESPACE}/configmaps`;
export const WORKER_PROFILES_PATH = `${WORKER_PROFILES_COLLECTION}/${WORKER_PROFILES_NAME}`;

/** The profile a worker started without --profile follows, when the cluster defines it. */
export const DEFAULT_WORKER_PROFILE = 'default';

/** kubelet configuration fields, as in its file (kubelet.config.k8s.io/v1beta1). */
export type KubeletValues = Record<string, unknown>;

/**
 * Fields kctl sets itself and a profile may not: what the tunnel, the CSR flow, `kctl reset` and
 * the cluster's own config depend on, each with the reason a refusal names.
 */
export const KCTL_KUBELET_FIELDS: Record<string, string> = {
  apiVersion: 'kctl writes the file',
  kind: 'kctl writes the file',
  enableServer: "the API server reaches kubelet's API through the tunnel",
  port: "the API server reaches kubelet's API through the tunnel on the port kctl sets",
  healthzPort: 'kctl checks kubelet there',
  healthzBindAddress: 'kctl checks kubelet there',
  readOnlyPort: "kctl keeps kubelet's API authenticated (no read-only port)",
  authentication: "kctl keeps kubelet's API authenticated by the cluster",
  authorization: "kctl keeps kubelet's API authorized by the cluster",
  tlsCertFile: "kubelet's serving certificate comes from the cluster's kubelet-serving CA",
  tlsPrivateKeyFile: "kubelet's serving certificate comes from the cluster's kubelet-serving CA",
  serverTLSBootstrap: "kubelet's serving certificate comes from the cluster's kubelet-serving CA",
  rotateCertificates: "kctl renews kubelet's client certificate this way",
  containerRuntimeEndpoint: "kubelet runs on kctl's containerd",
  imageServiceEndpoint: "kubelet runs on kctl's containerd",
  cgroupDriver: "kctl places pods under the node's own cgroup root (kctl reset removes it)",
  cgroupRoot: "kctl places pods under the node's own cgroup root (kctl reset removes it)",
  cgroupsPerQOS: "kctl places pods under the node's own cgroup root (kctl reset removes it)",
  podLogsDir: 'every path of a node is under its data dir',
  volumePluginDir: 'every path of a node is under its data dir',
  clusterDomain: "set by the cluster's spec.network.clusterDomain",
  clusterDNS: "set by the cluster's spec.network.clusterDNS",
  podCIDR: "a node's pod range is the one the cluster assigns",
};

/** Why `values` cannot be a profile's kubelet fields (kctl's own fields, or not in kubelet's shape). */
export function kubeletValuesProblems(values: unknown): ShapeProblem[] {
  if (values === null || typeof values !== 'object' || Array.isArray(values))
    return [{ path: [], message: `expected an object of kubelet configuration fields, got ${JSON.stringify(values)}` }];
  const owned = Object.keys(values)
    .filter((k) => k in KCTL_KUBELET_FIELDS)
    .map((k) => ({ path: [k], message: `set by kctl (${KCTL_KUBELET_FIELDS[k]}); remove it from the profile` }));
  const rest = Object.fromEntries(Object.entries(values).filter(([k]) => !(k in KCTL_KUBELET_FIELDS)));
  return [...owned, ...shapeProblems(rest, KUBELET_CONFIG_SHAPE)];
}

/** A profile name: a DNS label, as k0s's. */
export const PROFILE_NAME = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

export function workerProfilesConfigMap(
  profiles: Record<string, KubeletValues>,
): KubeManifest & { data: Record<string, string> } {
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: WORKER_PROFILES_NAME,
      namespace: WORKER_PROFILES_NAMESPACE,
      labels: { 'app.kubernetes.io/managed-by': 'kctl' },
    },
    data: Object.fromEntries(Object.entries(profiles).map(([name, values]) => [name, JSON.stringify(values)])),
  };
}

/** One profile from the ConfigMap's data: undefined when it has none by that name; throws naming a bad one. */
export function parseWorkerProfile(data: Record<string, string> | undefined, name: string): KubeletValues | undefined {
  const text = data?.[name];
  if (text === undefined) return undefined;
  let values: unknown;
  try {
    values = JSON.parse(text);
  } catch {
    throw new Error(`${WORKER_PROFILES_NAME}: profile ${name} is not JSON`);
  }
  const problems = kubeletValuesProblems(values);
  if (problems.length)
    throw new Error(`${WORKER_PROFILES_NAME}: profile ${name}: ${problems.map(describeProblem).join('; ')}`);
  return values as KubeletValues;
}

export function describeProblem(p: ShapeProblem): string {
  return `${p.path.map((k) => (typeof k === 'number' ? `[${k}]` : k)).join('.') || '(the profile)'}: ${p.message}`;
}

const isPlain = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * kctl's kubelet configuration with a profile laid over it: an object field merges key by key
 * (a profile's evictionHard entry keeps kctl's others), anything else the profile sets replaces.
 */
export function withProfile(base: KubeletValues, profile: KubeletValues | undefined): KubeletValues {
  if (!profile) return base;
  const out: KubeletValues = { ...base };
  for (const [k, v] of Object.entries(profile)) out[k] = isPlain(v) && isPlain(out[k]) ? withProfile(out[k], v) : v;
  return out;
}
