// The operator on the management cluster, as `kctl operator manifests` prints it: its
// ServiceAccount and the least it may do (KctlClusters, their status and finalizer; the Secrets,
// Services and Deployments it makes, in any namespace, deleting only a deleted
// cluster's Deployment; its pods, to know they are gone; Nodes' addresses; its leader Lease in
// kube-system), and a Deployment of the kctl image running `kctl operator run` with that account.
// Two replicas: one acts, the other takes over when it goes (the Lease).
import { kctlImageOf } from '../payload/images.ts';
import { KCTL_CLUSTER } from './crd.ts';
import { OPERATOR_DEFAULTS } from './index.ts';

export const OPERATOR_NAMESPACE = 'kctl-system';
const NAME = 'kctl-operator';

export function operatorManifests(version: string, replicas = 2): Record<string, unknown>[] {
  const labels = { 'app.kubernetes.io/name': NAME };
  return [
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: OPERATOR_NAMESPACE } },
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: NAME, namespace: OPERATOR_NAMESPACE } },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: NAME },
      rules: [
        { apiGroups: [KCTL_CLUSTER.group], resources: [KCTL_CLUSTER.plural], verbs: ['get', 'list', 'watch', 'patch'] },
        { apiGroups: [KCTL_CLUSTER.group], resources: [`${KCTL_CLUSTER.plural}/status`], verbs: ['get', 'patch'] },
        { apiGroups: [''], resources: ['services'], verbs: ['get', 'create', 'patch'] },
        // Delete: the kept credentials of an account taken out of a cluster's spec.
        { apiGroups: [''], resources: ['secrets'], verbs: ['get', 'list', 'create', 'patch', 'delete'] },
        { apiGroups: ['apps'], resources: ['deployments'], verbs: ['get', 'create', 'patch', 'delete'] },
        { apiGroups: ['policy'], resources: ['poddisruptionbudgets'], verbs: ['get', 'create', 'patch'] },
        { apiGroups: [''], resources: ['pods'], verbs: ['list'] },
        { apiGroups: [''], resources: ['nodes'], verbs: ['list'] },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: NAME },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: NAME },
      subjects: [{ kind: 'ServiceAccount', name: NAME, namespace: OPERATOR_NAMESPACE }],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: { name: NAME, namespace: 'kube-system' },
      rules: [
        {
          apiGroups: ['coordination.k8s.io'],
          resources: ['leases'],
          resourceNames: [OPERATOR_DEFAULTS.leaseName],
          verbs: ['get', 'update', 'patch'],
        },
        { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['create'] },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name: NAME, namespace: 'kube-system' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: NAME },
      subjects: [{ kind: 'ServiceAccount', name: NAME, namespace: OPERATOR_NAMESPACE }],
    },
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: NAME, namespace: OPERATOR_NAMESPACE, labels },
      spec: {
        replicas,
        selector: { matchLabels: labels },
        template: {
          metadata: { labels },
          spec: {
            serviceAccountName: NAME,
            containers: [
              {
                name: 'operator',
                image: kctlImageOf(version),
                imagePullPolicy: 'IfNotPresent',
                args: ['operator', 'run'],
                resources: { requests: { cpu: '50m', memory: '64Mi' } },
              },
            ],
          },
        },
      },
    },
  ];
}
