// The CoreDNS add-on: the objects of stack "coredns", shaped like kubeadm's and k0s's, so
// operators find the names they know (Service kube-dns, Deployment and ConfigMap coredns,
// label k8s-app=kube-dns). The image is the one kctl carries (no registry).
import type { KubeManifest } from '../../kube/client.ts';
import { COREDNS_IMAGE } from '../../payload/images.ts';

export interface CorednsOptions {
  clusterDomain: string;
  /** The Service's cluster IP: kubelet's clusterDNS on every worker. */
  clusterDNS: string;
}

const NS = 'kube-system';
const LABELS = { 'k8s-app': 'kube-dns' };

/** The Corefile: cluster names from the API, everything else to the node's resolvers. */
export function corefile(clusterDomain: string): string {
  return `.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes ${clusterDomain} in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
        max_concurrent 1000
    }
    cache 30
    loop
    reload
    loadbalance
}
`;
}

export function corednsObjects(o: CorednsOptions): KubeManifest[] {
  return [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'coredns', namespace: NS } },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: 'system:coredns' },
      rules: [
        { apiGroups: [''], resources: ['endpoints', 'services', 'pods', 'namespaces'], verbs: ['list', 'watch'] },
        { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['list', 'watch'] },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: 'system:coredns' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'system:coredns' },
      subjects: [{ kind: 'ServiceAccount', name: 'coredns', namespace: NS }],
    },
    {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'coredns', namespace: NS },
      data: { Corefile: corefile(o.clusterDomain) },
    },
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'coredns', namespace: NS, labels: LABELS },
      // No spec.replicas: the coredns-scaler sets it from the node count (coredns-scaler.ts).
      spec: {
        selector: { matchLabels: LABELS },
        strategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 1 } },
        template: {
          metadata: { labels: LABELS },
          spec: {
            priorityClassName: 'system-cluster-critical',
            serviceAccountName: 'coredns',
            nodeSelector: { 'kubernetes.io/os': 'linux' },
            tolerations: [{ key: 'CriticalAddonsOnly', operator: 'Exists' }],
            // One replica per node, so losing a node never loses DNS; the scaler keeps replicas <= nodes.
            affinity: {
              podAntiAffinity: {
                requiredDuringSchedulingIgnoredDuringExecution: [
                  { labelSelector: { matchLabels: LABELS }, topologyKey: 'kubernetes.io/hostname' },
                ],
              },
            },
            // CoreDNS forwards to the node's resolvers, not to itself.
            dnsPolicy: 'Default',
            containers: [
              {
                name: 'coredns',
                image: COREDNS_IMAGE,
                imagePullPolicy: 'IfNotPresent',
                args: ['-conf', '/etc/coredns/Corefile'],
                resources: { limits: { memory: '170Mi' }, requests: { cpu: '100m', memory: '70Mi' } },
                volumeMounts: [{ name: 'config-volume', mountPath: '/etc/coredns', readOnly: true }],
                ports: [
                  { name: 'dns', containerPort: 53, protocol: 'UDP' },
                  { name: 'dns-tcp', containerPort: 53, protocol: 'TCP' },
                  { name: 'metrics', containerPort: 9153, protocol: 'TCP' },
                ],
                securityContext: {
                  allowPrivilegeEscalation: false,
                  capabilities: { add: ['NET_BIND_SERVICE'], drop: ['ALL'] },
                  readOnlyRootFilesystem: true,
                },
                livenessProbe: {
                  httpGet: { path: '/health', port: 8080, scheme: 'HTTP' },
                  initialDelaySeconds: 60,
                  timeoutSeconds: 5,
                  failureThreshold: 5,
                },
                readinessProbe: { httpGet: { path: '/ready', port: 8181, scheme: 'HTTP' }, periodSeconds: 2 },
              },
            ],
            volumes: [
              { name: 'config-volume', configMap: { name: 'coredns', items: [{ key: 'Corefile', path: 'Corefile' }] } },
            ],
          },
        },
      },
    },
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'kube-dns', namespace: NS, labels: { ...LABELS, 'kubernetes.io/name': 'CoreDNS' } },
      spec: {
        selector: LABELS,
        clusterIP: o.clusterDNS,
        ports: [
          { name: 'dns', port: 53, protocol: 'UDP', targetPort: 53 },
          { name: 'dns-tcp', port: 53, protocol: 'TCP', targetPort: 53 },
          { name: 'metrics', port: 9153, protocol: 'TCP', targetPort: 9153 },
        ],
      },
    },
  ];
}
