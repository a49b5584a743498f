// The controllers' side of NetworkPolicy (kube/network-policy.ts): watch Nodes, Pods, Namespaces
// and NetworkPolicies, resolve what each node enforces on its own pods, and keep one ConfigMap
// per node, kube-system/kctl-netpol-<node>, with a Role and RoleBinding that let that node (and
// no other) read it. All three are owned by the Node, so they go when it goes. Every controller
// runs this: each writes only what differs from what it sees published, so they agree without a
// leader and a policy change does not wait for a lease to move when a controller dies.
// Whether policies are enforced is the cluster's (kube-system/kctl-pod-network, written at every
// controller start from spec.network.policy): off, every published object is removed and the
// workers drop their tables; on again, they are published again. Both live.
import type { Component, ComponentContext, ComponentStatus } from '../../base/component.ts';
import type { Logger } from '../../base/log.ts';
import type { KubeClient, KubeManifest } from '../../kube/client.ts';
import { Informer, type WatchedObject } from '../../kube/informer.ts';
import {
  NETPOL_COLLECTION,
  NETPOL_COMPONENT,
  NETPOL_NAMESPACE,
  netpolConfigMap,
  netpolConfigMapName,
  resolveNetworkPolicies,
  type KubeNamespace,
  type KubeNetworkPolicy,
  type KubePod,
} from '../../kube/network-policy.ts';
import { parsePodNetwork, POD_NETWORK_COLLECTION, POD_NETWORK_NAME } from '../../kube/pod-network.ts';
import { messageOf } from '../../base/errors.ts';

/** Changes that arrive together (a Deployment's pods) are resolved once. */
const DEBOUNCE_MS = 50;
/** Also resolved on this period: retries a failed write. */
const RESYNC_MS = 30_000;

interface KubeNodeMeta extends WatchedObject {
  metadata: { name: string; uid?: string };
}

interface PublishedConfigMap extends WatchedObject {
  data?: Record<string, string>;
}

const rbac = 'rbac.authorization.k8s.io';

/** The Role and RoleBinding that let `node` read its own policy object, owned by its Node. */
export function netpolReaderRbac(node: string, uid: string): KubeManifest[] {
  const name = `kctl:netpol:${node}`;
  const metadata = {
    name,
    namespace: NETPOL_NAMESPACE,
    labels: { 'app.kubernetes.io/managed-by': 'kctl', 'app.kubernetes.io/component': NETPOL_COMPONENT },
    ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: node, uid }],
  };
  return [
    {
      apiVersion: `${rbac}/v1`,
      kind: 'Role',
      metadata,
      rules: [
        {
          apiGroups: [''],
          resources: ['configmaps'],
          resourceNames: [netpolConfigMapName(node)],
          verbs: ['get', 'list', 'watch'],
        },
      ],
    },
    {
      apiVersion: `${rbac}/v1`,
      kind: 'RoleBinding',
      metadata,
      roleRef: { apiGroup: rbac, kind: 'Role', name },
      subjects: [{ apiGroup: rbac, kind: 'User', name: `system:node:${node}` }],
    },
  ];
}

export class NetworkPolicyPublisherComponent implements Component {
  readonly name = 'network-policy';
  private log!: Logger;
  private readonly nodes: Informer<KubeNodeMeta>;
  private readonly pods: Informer<KubePod & WatchedObject>;
  private readonly namespaces: Informer<KubeNamespace & WatchedObject>;
  private readonly policies: Informer<KubeNetworkPolicy & WatchedObject>;
  private readonly published: Informer<PublishedConfigMap>;
  /** Nodes (name/uid) whose reader RBAC this process has written. */
  private readonly rbacDone = new Set<string>();
  private timer?: NodeJS.Timeout;
  private resync?: NodeJS.Timeout;
  private running: Promise<void> = Promise.resolve();
  private lastError?: string;
  private stopped = false;

  private readonly podNetwork: Informer<PublishedConfigMap>;

  constructor(private readonly kube: KubeClient) {
    const informer = <T extends WatchedObject>(path: string, labelSelector?: string, fieldSelector?: string) =>
      new Informer<T>(
        kube,
        path,
        { labelSelector, fieldSelector },
        () => this.schedule(),
        (err) => (this.lastError = `cannot watch ${path}: ${messageOf(err)}`),
      );
    this.nodes = informer('/api/v1/nodes');
    this.pods = informer('/api/v1/pods');
    this.namespaces = informer('/api/v1/namespaces');
    this.policies = informer('/apis/networking.k8s.io/v1/networkpolicies');
    this.published = informer(NETPOL_COLLECTION, `app.kubernetes.io/component=${NETPOL_COMPONENT}`);
    this.podNetwork = informer(POD_NETWORK_COLLECTION, undefined, `metadata.name=${POD_NETWORK_NAME}`);
  }

  private all(): Informer<WatchedObject>[] {
    return [this.podNetwork, this.nodes, this.pods, this.namespaces, this.policies, this.published];
  }

  /** The cluster's choice; a damaged or missing kctl-pod-network enforces nothing new and removes nothing. */
  private enabled(): boolean | undefined {
    const cm = this.podNetwork.store.values().next().value;
    if (!cm) return undefined;
    try {
      return parsePodNetwork(cm.data).policy;
    } catch {
      return undefined;
    }
  }

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    for (const i of this.all()) i.start();
    this.resync = setInterval(() => this.schedule(), RESYNC_MS);
    this.resync.unref();
  }

  private schedule(): void {
    if (this.timer || this.stopped) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.running = this.running.then(() => this.publish());
    }, DEBOUNCE_MS);
  }

  private async publish(): Promise<void> {
    const enabled = this.enabled();
    if (this.stopped || enabled === undefined || !this.all().every((i) => i.hasSynced)) return;
    try {
      const want = enabled ? this.desired() : new Map<string, KubeManifest & { data: Record<string, string> }>();
      for (const [node, cm] of want) {
        const uid = cm.metadata.ownerReferences![0]!.uid;
        if (!this.rbacDone.has(`${node}/${uid}`)) {
          for (const o of netpolReaderRbac(node, uid)) await this.kube.apply(o, { fieldManager: 'kctl', force: true });
          this.rbacDone.add(`${node}/${uid}`);
        }
        if (this.published.get(cm.metadata.name, NETPOL_NAMESPACE)?.data?.policy === cm.data.policy) continue;
        await this.kube.apply(cm, { fieldManager: 'kctl', force: true });
        this.log.debug({ node }, 'network policy published');
      }
      const wanted = new Set([...want.values()].map((cm) => cm.metadata.name));
      for (const cm of this.published.store.values()) {
        if (wanted.has(cm.metadata.name)) continue;
        await this.kube.remove(`${NETPOL_COLLECTION}/${cm.metadata.name}`);
      }
      this.lastError = undefined;
    } catch (err) {
      const reason = messageOf(err);
      if (reason !== this.lastError) this.log.warn(`network policy not published: ${reason}`);
      this.lastError = reason;
    }
  }

  /** Every Node's object, from what the informers hold. */
  private desired(): Map<string, KubeManifest & { data: Record<string, string> }> {
    const byNode = resolveNetworkPolicies(
      this.policies.store.values(),
      this.pods.store.values(),
      this.namespaces.store.values(),
    );
    const out = new Map<string, KubeManifest & { data: Record<string, string> }>();
    for (const n of this.nodes.store.values()) {
      if (!n.metadata.uid) continue;
      out.set(
        n.metadata.name,
        netpolConfigMap(n.metadata.name, byNode.get(n.metadata.name) ?? { pods: [] }, { uid: n.metadata.uid }),
      );
    }
    return out;
  }

  status(): Partial<ComponentStatus> {
    return this.lastError ? { lastError: this.lastError } : {};
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    clearInterval(this.resync);
    for (const i of this.all()) await i.stop();
    await this.running;
  }
}
