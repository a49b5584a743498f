// Cluster objects kctl owns, applied at every start (server-side apply is idempotent):
// node bootstrap RBAC (kctl's own approver decides joins), the apiserver's kubelet access, cluster-info.
import { UPGRADE_NAMESPACE, UPGRADE_PLAN_NAME } from '../../kube/upgrade-plan.ts';
import { readFile } from 'node:fs/promises';
import { stringify } from 'yaml';
import type { KubeClient, KubeManifest } from '../../kube/client.ts';
import type { Logger } from '../../base/log.ts';
import type { PkiPaths } from '../../pki/index.ts';
import type { Component, ComponentContext } from '../../base/component.ts';
import type { ClusterConfig } from '../config/config.ts';
import { pollUntil } from '../../base/probe.ts';
import { POD_NETWORK_NAME, POD_NETWORK_NAMESPACE } from '../../kube/pod-network.ts';
import { publishPodNetwork } from './pod-network.ts';
import { publishWorkerProfiles } from './worker-profiles.ts';
import { WORKER_TOKEN_GROUP } from '../join/tokens.ts';
import { WORKER_PROFILES_NAME, WORKER_PROFILES_NAMESPACE } from '../../kube/worker-profiles.ts';
import { apiServerUrl } from '../config/urls.ts';
import { CA_PROOF_KEY } from '../../kube/cluster-info.ts';
import { KEEPS_ADDRESSES_ANNOTATION } from '../../base/ownership.ts';
import { NODE_LEASE_NAMESPACE } from '../../kube/controller-leases.ts';

const rbac = 'rbac.authorization.k8s.io';
export const LEASE_READER = 'kctl:controller-lease-reader';

function clusterRoleBinding(
  name: string,
  role: string,
  subject: { kind: 'Group' | 'User'; name: string },
): KubeManifest {
  return {
    apiVersion: `${rbac}/v1`,
    kind: 'ClusterRoleBinding',
    metadata: { name, labels: { 'app.kubernetes.io/managed-by': 'kctl' } },
    roleRef: { apiGroup: rbac, kind: 'ClusterRole', name: role },
    subjects: [{ apiGroup: rbac, ...subject }],
  };
}

/** The Role and RoleBinding that let every node read the Leases of one namespace. */
export function leaseReaderRbac(namespace: string): KubeManifest[] {
  return [
    {
      apiVersion: `${rbac}/v1`,
      kind: 'Role',
      metadata: { name: LEASE_READER, namespace },
      rules: [{ apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'list', 'watch'] }],
    },
    {
      apiVersion: `${rbac}/v1`,
      kind: 'RoleBinding',
      metadata: { name: LEASE_READER, namespace },
      roleRef: { apiGroup: rbac, kind: 'Role', name: LEASE_READER },
      subjects: [{ apiGroup: rbac, kind: 'Group', name: 'system:nodes' }],
    },
  ];
}

/**
 * kube-public/cluster-info: the API address and the cluster's trust bundle (ca.crt), signed by the
 * bootstrapsigner controller. Readable without credentials, and by nodes, which take a rotated
 * CA bundle from it (src/worker/ca-trust.ts) only with the rotation's cross-signature (`proof`).
 */
export function clusterInfo(cfg: ClusterConfig, caPem: string, proof?: string): KubeManifest {
  const kubeconfig = stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: '',
        cluster: { server: apiServerUrl(cfg), 'certificate-authority-data': Buffer.from(caPem).toString('base64') },
      },
    ],
    contexts: [],
    users: [],
  });
  const data = { kubeconfig, ...(proof ? { [CA_PROOF_KEY]: proof } : {}) };
  return { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'cluster-info', namespace: 'kube-public' }, data };
}

/** The last CA rotation's cross-signature this controller keeps, if any. */
export async function caProof(pki: PkiPaths): Promise<string | undefined> {
  return readFile(pki.caProof, 'utf8').catch(() => undefined);
}

/** Writes cluster-info with this CA bundle and the PKI's cross-signature (after a CA rotation step). */
export async function publishClusterInfo(
  kube: KubeClient,
  cfg: ClusterConfig,
  caPem: string,
  pki: PkiPaths,
): Promise<void> {
  await kube.apply(clusterInfo(cfg, caPem, await caProof(pki)), { fieldManager: 'kctl', force: true });
}

/** The admission policy (and its binding) that keeps pod ranges the allocator's: its name. */
export const NODE_POD_RANGE_POLICY = 'kctl-node-pod-ranges';
/** The admission policy (and its binding) that leaves the keeper of a shared address to admins: its name. */
export const NODE_ADDRESS_KEEPER_POLICY = 'kctl-node-address-keepers';

type Validation = { expression: string; message: string; reason: 'Forbidden' };

/** A built-in admission policy for what a node writes to a Node (group system:nodes), and its binding. */
function nodeWritePolicy(name: string, validations: Validation[]): KubeManifest[] {
  const group = 'admissionregistration.k8s.io/v1';
  const labels = { 'app.kubernetes.io/managed-by': 'kctl' };
  return [
    {
      apiVersion: group,
      kind: 'ValidatingAdmissionPolicy',
      metadata: { name, labels },
      spec: {
        failurePolicy: 'Fail',
        matchConstraints: {
          resourceRules: [
            { apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE', 'UPDATE'], resources: ['nodes'] },
          ],
        },
        matchConditions: [
          { name: 'written-by-a-node', expression: "request.userInfo.groups.exists(g, g == 'system:nodes')" },
        ],
        validations,
      },
    },
    {
      apiVersion: group,
      kind: 'ValidatingAdmissionPolicyBinding',
      metadata: { name, labels },
      spec: { policyName: name, validationActions: ['Deny'] },
    },
  ];
}

/** CEL: `value(obj)` is what it was before this write (nothing on a create). */
const unchangedBy = (value: (obj: string) => string, none: string): string =>
  `${value('object')} == (request.operation == 'UPDATE' && oldObject != null ? ${value('oldObject')} : ${none})`;

/**
 * Nodes may not write their own pod range: NodeRestriction lets a node create its Node with any
 * spec.podCIDR(s), and every consumer would then have to tell the lie from the allocator's. With
 * this built-in policy only kube-controller-manager (or an admin) sets them; the consumers still
 * judge what they read (base/ownership.ts judgePodRanges), for Nodes written before it.
 */
export function nodePodRangePolicy(): KubeManifest[] {
  const field = (f: string, none: string) => (obj: string) =>
    `(has(${obj}.spec) && has(${obj}.spec.${f}) ? ${obj}.spec.${f} : ${none})`;
  const message = (f: string) =>
    `a node may not set its own spec.${f}: pod ranges come from kube-controller-manager's allocator (kctl policy ${NODE_POD_RANGE_POLICY})`;
  return nodeWritePolicy(NODE_POD_RANGE_POLICY, [
    { expression: unchangedBy(field('podCIDR', "''"), "''"), message: message('podCIDR'), reason: 'Forbidden' },
    { expression: unchangedBy(field('podCIDRs', '[]'), '[]'), message: message('podCIDRs'), reason: 'Forbidden' },
  ]);
}

/** A Role that may read one ConfigMap of `namespace` (get, list and watch it by name), bound to `groups`. */
function configMapReader(role: string, namespace: string, configMap: string, groups: string[]): KubeManifest[] {
  return [
    {
      apiVersion: `${rbac}/v1`,
      kind: 'Role',
      metadata: { name: role, namespace },
      rules: [
        { apiGroups: [''], resources: ['configmaps'], resourceNames: [configMap], verbs: ['get', 'list', 'watch'] },
      ],
    },
    {
      apiVersion: `${rbac}/v1`,
      kind: 'RoleBinding',
      metadata: { name: role, namespace },
      roleRef: { apiGroup: rbac, kind: 'Role', name: role },
      subjects: groups.map((name) => ({ apiGroup: rbac, kind: 'Group', name })),
    },
  ];
}

/**
 * An address two Nodes report is nobody's until an admin names its keeper with an annotation on
 * that Node (base/ownership.ts KEEPS_ADDRESSES_ANNOTATION); a node could otherwise name itself.
 */
export function nodeAddressKeeperPolicy(): KubeManifest[] {
  const a = KEEPS_ADDRESSES_ANNOTATION;
  const annotation = (obj: string) =>
    `(has(${obj}.metadata.annotations) && '${a}' in ${obj}.metadata.annotations ? ${obj}.metadata.annotations['${a}'] : '')`;
  return nodeWritePolicy(NODE_ADDRESS_KEEPER_POLICY, [
    {
      expression: unchangedBy(annotation, "''"),
      message: `a node may not set its own ${a}: only an admin names the keeper of an address two nodes report (kctl policy ${NODE_ADDRESS_KEEPER_POLICY})`,
      reason: 'Forbidden',
    },
  ]);
}

export function bootstrapObjects(cfg: ClusterConfig, caPem: string, proof?: string): KubeManifest[] {
  return [
    ...nodePodRangePolicy(),
    ...nodeAddressKeeperPolicy(),
    // Bootstrap tokens (group system:bootstrappers) may create node client CSRs. kctl's CSR approver
    // decides them (a token never takes a registered node's name), not kube-controller-manager.
    clusterRoleBinding('kctl:bootstrappers:node-bootstrapper', 'system:node-bootstrapper', {
      kind: 'Group',
      name: 'system:bootstrappers',
    }),
    // Nodes renew their own client certificates.
    clusterRoleBinding(
      'kctl:nodes:selfnodeclient-autoapprove',
      'system:certificates.k8s.io:certificatesigningrequests:selfnodeclient',
      {
        kind: 'Group',
        name: 'system:nodes',
      },
    ),
    // kube-proxy on workers runs with the node's own credentials.
    clusterRoleBinding('kctl:nodes:node-proxier', 'system:node-proxier', { kind: 'Group', name: 'system:nodes' }),
    // kube-apiserver -> kubelet (logs, exec, port-forward) authenticates as this user.
    clusterRoleBinding('kctl:apiserver-kubelet-client', 'system:kubelet-api-admin', {
      kind: 'User',
      name: 'kube-apiserver-kubelet-client',
    }),
    clusterInfo(cfg, caPem, proof),
    // Workers read the controllers' leases to hold a konnectivity stream to every live controller:
    // in a namespace that holds those leases and nothing else (nodes of an older kctl read
    // kube-system's while they remain: node-lease-access.ts).
    {
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: NODE_LEASE_NAMESPACE, labels: { 'app.kubernetes.io/managed-by': 'kctl' } },
    },
    ...leaseReaderRbac(NODE_LEASE_NAMESPACE),
    // Nodes read the upgrade plan (this one ConfigMap, nothing else in kube-system) to pull a new kctl.
    ...configMapReader('kctl:upgrade-plan-reader', UPGRADE_NAMESPACE, UPGRADE_PLAN_NAME, ['system:nodes']),
    // Nodes follow the pod network mode (this one ConfigMap).
    ...configMapReader('kctl:pod-network-reader', POD_NETWORK_NAMESPACE, POD_NETWORK_NAME, ['system:nodes']),
    // Workers read their kubelet profile (this one ConfigMap) before kubelet first starts, with
    // the join token, and follow it as nodes after.
    ...configMapReader('kctl:worker-profiles-reader', WORKER_PROFILES_NAMESPACE, WORKER_PROFILES_NAME, [
      'system:nodes',
      WORKER_TOKEN_GROUP,
    ]),
    {
      apiVersion: `${rbac}/v1`,
      kind: 'Role',
      metadata: { name: 'kctl:cluster-info-reader', namespace: 'kube-public' },
      rules: [{ apiGroups: [''], resources: ['configmaps'], resourceNames: ['cluster-info'], verbs: ['get'] }],
    },
    {
      apiVersion: `${rbac}/v1`,
      kind: 'RoleBinding',
      metadata: { name: 'kctl:cluster-info-reader', namespace: 'kube-public' },
      roleRef: { apiGroup: rbac, kind: 'Role', name: 'kctl:cluster-info-reader' },
      subjects: [
        { apiGroup: rbac, kind: 'User', name: 'system:anonymous' },
        { apiGroup: rbac, kind: 'Group', name: 'system:nodes' },
      ],
    },
  ];
}

/**
 * Objects earlier kctl versions made that must not stay: with this binding kube-controller-manager
 * approved every bootstrap CSR, whatever node name it asked for.
 */
export const RETIRED_OBJECTS = [
  '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kctl:bootstrappers:nodeclient-autoapprove',
];

export class BootstrapComponent implements Component {
  readonly name = 'bootstrap';
  private log!: Logger;

  constructor(
    private readonly cfg: ClusterConfig,
    private readonly pki: PkiPaths,
    private readonly kube: KubeClient,
  ) {}

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async ready(signal: AbortSignal): Promise<void> {
    const docs = bootstrapObjects(this.cfg, await readFile(this.pki.caCert, 'utf8'), await caProof(this.pki));
    // Server-side apply, field manager kctl, conflicts forced: kctl owns these objects.
    await pollUntil(
      signal,
      'bootstrap objects',
      async () => {
        // First: on a new cluster, cluster-info does not exist yet (publishPodNetwork reads that).
        if (this.cfg.spec.profile === 'full') {
          await publishPodNetwork(this.kube, this.cfg, this.log, signal);
          await publishWorkerProfiles(this.kube, this.cfg, this.log, signal);
        }
        for (const d of docs) await this.kube.apply(d, { fieldManager: 'kctl', force: true }, signal);
        for (const path of RETIRED_OBJECTS) {
          await this.kube.remove(path, signal);
        }
      },
      1000,
    );
    this.log.info({ objects: docs.length }, 'bootstrap objects applied');
  }
}
