// What a KctlCluster becomes on the management cluster, as plain objects (the operator applies
// them; reconcile.ts): its config in a ConfigMap, its control plane as a Deployment of the kctl
// image, and a Service in front of it. Each is owned by the KctlCluster, so deleting the object
// deletes them (Kubernetes' garbage collector); its Secrets are made apart (pki.ts), once.
import { stringify } from 'yaml';
import { kctlImageOf } from '../payload/images.ts';
import { KCTL_CLUSTER } from './crd.ts';

export interface KctlClusterSpec {
  version: string;
  replicas?: number;
  config?: Record<string, unknown>;
  datastore?: { postgres?: { secretName: string } };
  exposure?: { type?: 'NodePort' | 'LoadBalancer' | 'ClusterIP'; nodePort?: number };
  resources?: { requests?: Record<string, string | number>; limits?: Record<string, string | number> };
}

export interface KctlCluster {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    namespace: string;
    uid: string;
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

/** The API's port inside the pod; a Service maps it outward. */
export const POD_API_PORT = 6443;

/** The names of what a cluster owns, in its namespace. */
export const ownedNames = (name: string) => ({
  workload: name,
  config: `${name}-config`,
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
  labels: { 'app.kubernetes.io/managed-by': 'kctl-operator', [CLUSTER_LABEL]: c.metadata.name },
  ownerReferences: [ownerOf(c)],
});

/**
 * The hosted cluster's ClusterConfig: the object's spec.config with what the pod decides: the
 * address its clients use (a management node's) with the other nodes' as names, and its data
 * source (the database the operator made for it).
 */
export function hostedConfig(c: KctlCluster, o: { address: string; sans: string[]; dataSource: string }): string {
  const spec = structuredClone(c.spec.config ?? {}) as Record<string, Record<string, unknown>>;
  const api = (spec.api ?? {}) as { sans?: string[] };
  spec.api = { ...api, address: o.address, port: POD_API_PORT, sans: [...new Set([...(api.sans ?? []), ...o.sans])] };
  spec.storage = { ...(spec.storage ?? {}), type: 'kine', kine: { dataSource: o.dataSource } };
  return stringify({
    apiVersion: 'kctl.dev/v1alpha1',
    kind: 'ClusterConfig',
    metadata: { name: c.metadata.name },
    spec,
  });
}

export function configMap(c: KctlCluster, config: string) {
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: meta(c, ownedNames(c.metadata.name).config),
    data: { 'kctl.yaml': config },
  };
}

export function deployment(c: KctlCluster) {
  const names = ownedNames(c.metadata.name);
  const labels = { [CLUSTER_LABEL]: c.metadata.name };
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: meta(c, names.workload),
    spec: {
      replicas: c.spec.replicas ?? 1,
      selector: { matchLabels: labels },
      template: {
        metadata: { labels },
        spec: {
          terminationGracePeriodSeconds: 30,
          containers: [
            {
              name: 'kctl',
              image: kctlImageOf(c.spec.version),
              imagePullPolicy: 'IfNotPresent',
              args: ['controller', '--config', '/etc/kctl/kctl.yaml', '--shared-pki', '/etc/kctl/pki'],
              ports: [{ name: 'api', containerPort: POD_API_PORT }],
              readinessProbe: { tcpSocket: { port: POD_API_PORT }, periodSeconds: 2 },
              ...(c.spec.resources ? { resources: c.spec.resources } : {}),
              volumeMounts: [
                { name: 'config', mountPath: '/etc/kctl/kctl.yaml', subPath: 'kctl.yaml' },
                { name: 'pki', mountPath: '/etc/kctl/pki', readOnly: true },
                { name: 'data', mountPath: '/var/lib/kctl' },
              ],
            },
          ],
          volumes: [
            { name: 'config', configMap: { name: names.config } },
            { name: 'pki', secret: { secretName: names.pki, defaultMode: 0o400 } },
            { name: 'data', emptyDir: {} },
          ],
        },
      },
    },
  };
}

export function service(c: KctlCluster) {
  const type = c.spec.exposure?.type ?? 'NodePort';
  const nodePort = type === 'NodePort' ? c.spec.exposure?.nodePort : undefined;
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: meta(c, ownedNames(c.metadata.name).workload),
    spec: {
      type,
      selector: { [CLUSTER_LABEL]: c.metadata.name },
      ports: [{ name: 'api', port: POD_API_PORT, targetPort: POD_API_PORT, ...(nodePort ? { nodePort } : {}) }],
    },
  };
}

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
