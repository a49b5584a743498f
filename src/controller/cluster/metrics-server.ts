// The metrics-server add-on: the objects of stack "metrics-server", shaped like upstream's
// components.yaml, with two differences that keep TLS verified on both sides:
// - kubelets are scraped with their serving certificates checked against the kubelet CA bundle
//   (kctl's kubelet-serving CA, which kube-controller-manager signs them with), never
//   --kubelet-insecure-tls; a change of the bundle rolls the pods (its hash is on the template);
// - metrics-server serves a certificate from kctl's add-ons CA, which the APIService pins
//   (upstream's manifest skips verification instead).
// kube-apiserver reaches it through the konnectivity tunnel (egress "cluster") at its pod IP.
import { createHash } from 'node:crypto';
import type { KubeManifest } from '../../kube/client.ts';
import { METRICS_SERVER_IMAGE } from '../../payload/images.ts';

export interface MetricsServerOptions {
  /** PEM of the CA that signed `certPem` (the APIService's caBundle). */
  caPem: string;
  certPem: string;
  keyPem: string;
  /** PEM of the CAs metrics-server trusts for kubelets' serving certificates. */
  kubeletCaPem: string;
}

const NS = 'kube-system';
const NAME = 'metrics-server';
const LABELS = { 'k8s-app': NAME };
const RBAC = 'rbac.authorization.k8s.io/v1';
const b64 = (s: string): string => Buffer.from(s).toString('base64');

export function metricsServerObjects(o: MetricsServerOptions): KubeManifest[] {
  return [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: NAME, namespace: NS, labels: LABELS } },
    {
      apiVersion: RBAC,
      kind: 'ClusterRole',
      metadata: {
        name: 'system:aggregated-metrics-reader',
        labels: {
          ...LABELS,
          'rbac.authorization.k8s.io/aggregate-to-admin': 'true',
          'rbac.authorization.k8s.io/aggregate-to-edit': 'true',
          'rbac.authorization.k8s.io/aggregate-to-view': 'true',
        },
      },
      rules: [{ apiGroups: ['metrics.k8s.io'], resources: ['pods', 'nodes'], verbs: ['get', 'list', 'watch'] }],
    },
    {
      apiVersion: RBAC,
      kind: 'ClusterRole',
      metadata: { name: 'system:metrics-server', labels: LABELS },
      rules: [
        { apiGroups: [''], resources: ['nodes/metrics'], verbs: ['get'] },
        { apiGroups: [''], resources: ['pods', 'nodes'], verbs: ['get', 'list', 'watch'] },
      ],
    },
    {
      apiVersion: RBAC,
      kind: 'RoleBinding',
      metadata: { name: 'metrics-server-auth-reader', namespace: NS, labels: LABELS },
      roleRef: {
        apiGroup: 'rbac.authorization.k8s.io',
        kind: 'Role',
        name: 'extension-apiserver-authentication-reader',
      },
      subjects: [{ kind: 'ServiceAccount', name: NAME, namespace: NS }],
    },
    {
      apiVersion: RBAC,
      kind: 'ClusterRoleBinding',
      metadata: { name: 'metrics-server:system:auth-delegator', labels: LABELS },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'system:auth-delegator' },
      subjects: [{ kind: 'ServiceAccount', name: NAME, namespace: NS }],
    },
    {
      apiVersion: RBAC,
      kind: 'ClusterRoleBinding',
      metadata: { name: 'system:metrics-server', labels: LABELS },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'system:metrics-server' },
      subjects: [{ kind: 'ServiceAccount', name: NAME, namespace: NS }],
    },
    {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'metrics-server-kubelet-ca', namespace: NS, labels: LABELS },
      data: { 'ca.crt': o.kubeletCaPem },
    },
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 'metrics-server-tls', namespace: NS, labels: LABELS },
      type: 'kubernetes.io/tls',
      data: { 'tls.crt': b64(o.certPem), 'tls.key': b64(o.keyPem) },
    },
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: NAME, namespace: NS, labels: LABELS },
      spec: { selector: LABELS, ports: [{ name: 'https', port: 443, protocol: 'TCP', targetPort: 'https' }] },
    },
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: NAME, namespace: NS, labels: LABELS },
      spec: {
        selector: { matchLabels: LABELS },
        strategy: { rollingUpdate: { maxUnavailable: 0 } },
        template: {
          metadata: {
            labels: LABELS,
            annotations: { 'kctl.dev/kubelet-ca-sha256': createHash('sha256').update(o.kubeletCaPem).digest('hex') },
          },
          spec: {
            priorityClassName: 'system-cluster-critical',
            serviceAccountName: NAME,
            nodeSelector: { 'kubernetes.io/os': 'linux' },
            containers: [
              {
                name: NAME,
                image: METRICS_SERVER_IMAGE,
                imagePullPolicy: 'IfNotPresent',
                args: [
                  '--cert-dir=/tmp',
                  '--secure-port=10250',
                  '--tls-cert-file=/etc/metrics-server/tls.crt',
                  '--tls-private-key-file=/etc/metrics-server/tls.key',
                  '--kubelet-certificate-authority=/etc/kubelet-ca/ca.crt',
                  '--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname',
                  '--kubelet-use-node-status-port',
                  '--metric-resolution=15s',
                ],
                ports: [{ name: 'https', containerPort: 10250, protocol: 'TCP' }],
                readinessProbe: {
                  httpGet: { path: '/readyz', port: 'https', scheme: 'HTTPS' },
                  initialDelaySeconds: 20,
                  periodSeconds: 10,
                  failureThreshold: 3,
                },
                livenessProbe: {
                  httpGet: { path: '/livez', port: 'https', scheme: 'HTTPS' },
                  periodSeconds: 10,
                  failureThreshold: 3,
                },
                resources: { requests: { cpu: '100m', memory: '200Mi' } },
                securityContext: {
                  allowPrivilegeEscalation: false,
                  capabilities: { drop: ['ALL'] },
                  readOnlyRootFilesystem: true,
                  runAsNonRoot: true,
                  runAsUser: 1000,
                },
                volumeMounts: [
                  { name: 'tmp-dir', mountPath: '/tmp' },
                  { name: 'tls', mountPath: '/etc/metrics-server', readOnly: true },
                  { name: 'kubelet-ca', mountPath: '/etc/kubelet-ca', readOnly: true },
                ],
              },
            ],
            volumes: [
              { name: 'tmp-dir', emptyDir: {} },
              { name: 'tls', secret: { secretName: 'metrics-server-tls' } },
              { name: 'kubelet-ca', configMap: { name: 'metrics-server-kubelet-ca' } },
            ],
          },
        },
      },
    },
    {
      apiVersion: 'apiregistration.k8s.io/v1',
      kind: 'APIService',
      metadata: { name: 'v1beta1.metrics.k8s.io', labels: LABELS },
      spec: {
        group: 'metrics.k8s.io',
        version: 'v1beta1',
        groupPriorityMinimum: 100,
        versionPriority: 100,
        service: { name: NAME, namespace: NS, port: 443 },
        caBundle: b64(o.caPem),
      },
    },
  ];
}
