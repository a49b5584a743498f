// The operator on the management cluster, as `kctl operator manifests` prints it: its
// ServiceAccount and the least it may do (KctlClusters, their status and finalizer; the Secrets,
// Services and Deployments it makes, in any namespace, deleting only a deleted
// cluster's Deployment; its pods, to know they are gone; Nodes' addresses; its leader Lease in
// kube-system), and a Deployment of the kctl image running `kctl operator run` with that account.
// Two replicas: one acts, the other takes over when it goes (the Lease). With a front door, also
// the door (`kctl operator door`) on every node, a DaemonSet, with its own account, which may only
// read KctlClusters, Services and the one door key Secret, and its Service: a node port when the
// door's address names one, else a LoadBalancer on that port. The Service keeps the client's
// address (the door hands it on), which sends a node's connections only to a door pod on the node
// they arrive at: with one on every node, any node's address (or a load balancer) is the door.
import { joinHostPort } from '../base/addresses.ts';
import { kctlImageOf } from '../payload/images.ts';
import { MANAGEMENT_DOOR_DEFAULTS } from './door.ts';
import { DOOR_KEY_SECRET, type ManagementDoor } from './door-keys.ts';
import { KCTL_CLUSTER } from './crd.ts';
import { OPERATOR_DEFAULTS } from './index.ts';

export const OPERATOR_NAMESPACE = 'kctl-system';
const NAME = 'kctl-operator';

export function operatorManifests(version: string, replicas = 2, door?: ManagementDoor): Record<string, unknown>[] {
  const labels = { 'app.kubernetes.io/name': NAME };
  const doorArgs = door
    ? ['--front-door-domain', door.domain, '--front-door-address', joinHostPort(door.host, door.port)]
    : [];
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
                args: ['operator', 'run', ...doorArgs],
                resources: { requests: { cpu: '50m', memory: '64Mi' } },
              },
            ],
          },
        },
      },
    },
    ...(door ? doorManifests(version, door) : []),
  ];
}

const DOOR = 'kctl-front-door';

function doorManifests(version: string, door: ManagementDoor): Record<string, unknown>[] {
  const labels = { 'app.kubernetes.io/name': DOOR };
  const nodePort = door.port >= 30000 && door.port <= 32767;
  const port = MANAGEMENT_DOOR_DEFAULTS.port;
  const rbac = (kind: 'ClusterRole' | 'Role', namespace?: string) => ({
    metadata: { name: DOOR, ...(namespace ? { namespace } : {}) },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind, name: DOOR },
    subjects: [{ kind: 'ServiceAccount', name: DOOR, namespace: OPERATOR_NAMESPACE }],
  });
  return [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: DOOR, namespace: OPERATOR_NAMESPACE } },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: DOOR },
      rules: [
        { apiGroups: [KCTL_CLUSTER.group], resources: [KCTL_CLUSTER.plural], verbs: ['list', 'watch'] },
        { apiGroups: [''], resources: ['services'], verbs: ['list', 'watch'] },
      ],
    },
    { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', ...rbac('ClusterRole') },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata: { name: DOOR, namespace: DOOR_KEY_SECRET.namespace },
      rules: [{ apiGroups: [''], resources: ['secrets'], resourceNames: [DOOR_KEY_SECRET.name], verbs: ['get'] }],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      ...rbac('Role', DOOR_KEY_SECRET.namespace),
    },
    {
      apiVersion: 'apps/v1',
      kind: 'DaemonSet',
      metadata: { name: DOOR, namespace: OPERATOR_NAMESPACE, labels },
      spec: {
        selector: { matchLabels: labels },
        template: {
          metadata: { labels },
          spec: {
            serviceAccountName: DOOR,
            containers: [
              {
                name: 'door',
                image: kctlImageOf(version),
                imagePullPolicy: 'IfNotPresent',
                args: ['operator', 'door', '--domain', door.domain, '--port', String(port)],
                ports: [{ name: 'door', containerPort: port }],
                resources: { requests: { cpu: '50m', memory: '64Mi' } },
              },
            ],
          },
        },
      },
    },
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: DOOR, namespace: OPERATOR_NAMESPACE, labels },
      spec: {
        type: nodePort ? 'NodePort' : 'LoadBalancer',
        // The client's own address reaches the door (it hands it on in the PROXY header, for the
        // pods' per-client bounds); every node runs a door pod, so every node answers.
        externalTrafficPolicy: 'Local',
        selector: labels,
        ports: [
          {
            name: 'door',
            port: nodePort ? port : door.port,
            targetPort: port,
            ...(nodePort ? { nodePort: door.port } : {}),
          },
        ],
      },
    },
  ];
}
