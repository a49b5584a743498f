// REST paths for Kubernetes resources. The API server does not say which kinds are namespaced
// or what their plural is without a discovery round trip, so the kinds kctl applies are listed
// here; anything else goes through resourcePath() with its resource name spelled out.

export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    namespace?: string;
    resourceVersion?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ownerReferences?: { apiVersion: string; kind: string; name: string; uid: string }[];
  };
}

/** A whole object as kctl writes it: the identifying fields and whatever else its kind has. */
export type KubeManifest = KubeObject & Record<string, unknown>;

interface KindInfo {
  resource: string;
  namespaced: boolean;
}

/** Kinds kctl applies by object: "group/version kind" (core group: "v1 Kind"). */
const KNOWN_KINDS: Record<string, KindInfo> = {
  'v1 ConfigMap': { resource: 'configmaps', namespaced: true },
  'v1 Service': { resource: 'services', namespaced: true },
  'apps/v1 Deployment': { resource: 'deployments', namespaced: true },
  'policy/v1 PodDisruptionBudget': { resource: 'poddisruptionbudgets', namespaced: true },
  'v1 Secret': { resource: 'secrets', namespaced: true },
  'v1 ServiceAccount': { resource: 'serviceaccounts', namespaced: true },
  'v1 Namespace': { resource: 'namespaces', namespaced: false },
  'rbac.authorization.k8s.io/v1 ClusterRole': { resource: 'clusterroles', namespaced: false },
  'rbac.authorization.k8s.io/v1 ClusterRoleBinding': { resource: 'clusterrolebindings', namespaced: false },
  'rbac.authorization.k8s.io/v1 Role': { resource: 'roles', namespaced: true },
  'rbac.authorization.k8s.io/v1 RoleBinding': { resource: 'rolebindings', namespaced: true },
  'coordination.k8s.io/v1 Lease': { resource: 'leases', namespaced: true },
  'v1 Endpoints': { resource: 'endpoints', namespaced: true },
  'discovery.k8s.io/v1 EndpointSlice': { resource: 'endpointslices', namespaced: true },
  'admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy': {
    resource: 'validatingadmissionpolicies',
    namespaced: false,
  },
  'admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding': {
    resource: 'validatingadmissionpolicybindings',
    namespaced: false,
  },
};

export interface ResourceRef {
  /** "v1" for the core group, else "group/version". */
  apiVersion: string;
  /** Plural resource name, e.g. "nodes". */
  resource: string;
  namespace?: string;
  name?: string;
  subresource?: string;
}

/** /api/v1/namespaces/ns/configmaps/name, /apis/group/version/resource/name, … */
export function resourcePath(r: ResourceRef): string {
  const base = r.apiVersion.includes('/') ? `/apis/${r.apiVersion}` : `/api/${r.apiVersion}`;
  const ns = r.namespace ? `/namespaces/${encodeURIComponent(r.namespace)}` : '';
  const name = r.name ? `/${encodeURIComponent(r.name)}` : '';
  const sub = r.name && r.subresource ? `/${r.subresource}` : '';
  return `${base}${ns}/${r.resource}${name}${sub}`;
}

/** The path of one object of a kind kctl knows (see KNOWN_KINDS). */
export function objectPath(obj: KubeObject): string {
  const info = KNOWN_KINDS[`${obj.apiVersion} ${obj.kind}`];
  if (!info)
    throw new Error(
      `kctl's API client does not know the REST path of ${obj.kind} (${obj.apiVersion}); add it to KNOWN_KINDS in src/kube/paths.ts`,
    );
  if (info.namespaced && !obj.metadata.namespace)
    throw new Error(`${obj.kind} ${obj.metadata.name} needs metadata.namespace`);
  return resourcePath({
    apiVersion: obj.apiVersion,
    resource: info.resource,
    namespace: info.namespaced ? obj.metadata.namespace : undefined,
    name: obj.metadata.name,
  });
}
