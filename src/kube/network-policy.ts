// NetworkPolicy, resolved per node. The controllers watch Pods, Namespaces and NetworkPolicies
// and reduce them, for each node, to what that node enforces on its own pods: for every pod a
// policy isolates, the peers (addresses) and ports it may talk to. A node reads only its own
// result (kube-system/kctl-netpol-<node>, one RBAC rule per node naming that one object), so a
// node never sees other pods' specs, labels or policies: at most the addresses its pods may reach.
// Enforcement on the node is worker/network-policy.ts.
import type { KubeManifest } from './client.ts';
import { messageOf } from '../base/errors.ts';

export const NETPOL_NAMESPACE = 'kube-system';
export const NETPOL_COMPONENT = 'network-policy';
export const NETPOL_COLLECTION = `/api/v1/namespaces/${NETPOL_NAMESPACE}/configmaps`;
export const netpolConfigMapName = (node: string): string => `kctl-netpol-${node}`;

// ---- the Kubernetes objects, as far as policy needs them ----

export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: { key: string; operator: string; values?: string[] }[];
}

interface PolicyPortSpec {
  protocol?: string;
  port?: number | string;
  endPort?: number;
}

interface PolicyPeerSpec {
  podSelector?: LabelSelector;
  namespaceSelector?: LabelSelector;
  ipBlock?: { cidr: string; except?: string[] };
}

export interface KubeNetworkPolicy {
  metadata: { name: string; namespace?: string };
  spec?: {
    podSelector?: LabelSelector;
    policyTypes?: string[];
    ingress?: { from?: PolicyPeerSpec[]; ports?: PolicyPortSpec[] }[];
    egress?: { to?: PolicyPeerSpec[]; ports?: PolicyPortSpec[] }[];
  };
}

export interface KubePod {
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  spec?: {
    nodeName?: string;
    hostNetwork?: boolean;
    containers?: { ports?: { name?: string; containerPort: number; protocol?: string }[] }[];
  };
  status?: { phase?: string; podIP?: string };
}

export interface KubeNamespace {
  metadata: { name: string; labels?: Record<string, string> };
}

// ---- what a node enforces ----

export type PolicyProtocol = 'TCP' | 'UDP' | 'SCTP';

/** A port or range of one protocol; no port: every port of it. */
export interface PolicyPort {
  protocol: PolicyProtocol;
  port?: number;
  endPort?: number;
}

/** Addresses: a CIDR (a pod is its /32) less the CIDRs in except. */
export interface PolicyPeer {
  cidr: string;
  except?: string[];
}

/** One allowed path: no peers means any address, no ports means any port of any protocol. */
export interface PolicyAllow {
  peers?: PolicyPeer[];
  ports?: PolicyPort[];
}

/** One pod of the node. ingress/egress absent: not isolated that way; empty: nothing allowed. */
export interface PodPolicy {
  pod: string;
  ip: string;
  ingress?: PolicyAllow[];
  egress?: PolicyAllow[];
}

export interface NodePolicy {
  pods: PodPolicy[];
}

// ---- resolution ----

/** Kubernetes label selector semantics; an empty selector matches everything. */
export function selects(sel: LabelSelector | undefined, labels: Record<string, string> | undefined): boolean {
  const l = labels ?? {};
  for (const [k, v] of Object.entries(sel?.matchLabels ?? {})) if (l[k] !== v) return false;
  for (const e of sel?.matchExpressions ?? []) {
    const has = Object.hasOwn(l, e.key);
    const inValues = has && (e.values ?? []).includes(l[e.key]!);
    const ok =
      e.operator === 'In'
        ? inValues
        : e.operator === 'NotIn'
          ? !inValues
          : e.operator === 'Exists'
            ? has
            : e.operator === 'DoesNotExist'
              ? !has
              : false;
    if (!ok) return false;
  }
  return true;
}

const protocolOf = (p: string | undefined): PolicyProtocol | undefined =>
  p === undefined || p === 'TCP' ? 'TCP' : p === 'UDP' || p === 'SCTP' ? p : undefined;

/** A pod that takes part in the pod network: scheduled, has its address, not on the host's network, not finished. */
function networked(p: KubePod): p is KubePod & { status: { podIP: string } } {
  return (
    !!p.status?.podIP &&
    !p.spec?.hostNetwork &&
    p.status.phase !== 'Succeeded' &&
    p.status.phase !== 'Failed' &&
    p.status.podIP.includes('.')
  );
}

/** The container port of `pod` named `name` with `protocol`. */
function namedPort(pod: KubePod, name: string, protocol: PolicyProtocol): number | undefined {
  for (const c of pod.spec?.containers ?? []) {
    for (const p of c.ports ?? [])
      if (p.name === name && (protocolOf(p.protocol) ?? 'TCP') === protocol) return p.containerPort;
  }
  return undefined;
}

/** Numeric ports as they are, named ones looked up on `pod` (dropped when it has none by that name). */
function resolvePorts(specs: PolicyPortSpec[], pod: KubePod | undefined): PolicyPort[] {
  const out: PolicyPort[] = [];
  for (const s of specs) {
    const protocol = protocolOf(s.protocol);
    if (!protocol) continue;
    if (s.port === undefined) out.push({ protocol });
    else if (typeof s.port === 'number')
      out.push(
        s.endPort && s.endPort > s.port ? { protocol, port: s.port, endPort: s.endPort } : { protocol, port: s.port },
      );
    else if (/^\d+$/.test(s.port)) out.push({ protocol, port: Number(s.port) });
    else {
      const n = pod && namedPort(pod, s.port, protocol);
      if (n !== undefined) out.push({ protocol, port: n });
    }
  }
  return out;
}

const isNamed = (s: PolicyPortSpec): boolean => typeof s.port === 'string' && !/^\d+$/.test(s.port);

class ClusterView {
  private readonly nsLabels = new Map<string, Record<string, string>>();
  readonly pods: (KubePod & { status: { podIP: string } })[];

  constructor(pods: Iterable<KubePod>, namespaces: Iterable<KubeNamespace>) {
    for (const n of namespaces)
      this.nsLabels.set(n.metadata.name, { 'kubernetes.io/metadata.name': n.metadata.name, ...n.metadata.labels });
    this.pods = [...pods].filter(networked);
  }

  /** The pods a peer names, seen from a policy in `namespace`. */
  peerPods(peer: PolicyPeerSpec, namespace: string): KubePod[] {
    if (!peer.podSelector && !peer.namespaceSelector) return [];
    return this.pods.filter((p) => {
      const ns = p.metadata.namespace ?? 'default';
      if (peer.namespaceSelector ? !selects(peer.namespaceSelector, this.nsLabels.get(ns)) : ns !== namespace)
        return false;
      return selects(peer.podSelector, p.metadata.labels);
    });
  }
}

/** One ingress or egress rule as allows: `local` is the policed pod (ingress named ports are its own). */
function ruleAllows(
  view: ClusterView,
  namespace: string,
  peers: PolicyPeerSpec[] | undefined,
  portSpecs: PolicyPortSpec[] | undefined,
  local: KubePod,
  direction: 'ingress' | 'egress',
): PolicyAllow[] {
  const specs = portSpecs ?? [];
  const ipPeers: PolicyPeer[] = [];
  const pods: KubePod[] = [];
  for (const peer of peers ?? []) {
    if (peer.ipBlock)
      ipPeers.push(
        peer.ipBlock.except?.length
          ? { cidr: peer.ipBlock.cidr, except: [...peer.ipBlock.except] }
          : { cidr: peer.ipBlock.cidr },
      );
    else pods.push(...view.peerPods(peer, namespace));
  }
  const anyPeer = !peers || peers.length === 0;
  const podPeer = (p: KubePod): PolicyPeer => ({ cidr: `${p.status!.podIP!}/32` });
  const withPorts = (ps: PolicyPeer[] | undefined, ports: PolicyPort[] | undefined): PolicyAllow => ({
    ...(ps ? { peers: ps } : {}),
    ...(ports ? { ports } : {}),
  });
  if (specs.length === 0) return anyPeer ? [{}] : [withPorts([...ipPeers, ...pods.map(podPeer)], undefined)];
  // Egress to a named port: the port is the destination pod's, so each pod peer gets its own.
  if (direction === 'egress' && specs.some(isNamed)) {
    const out: PolicyAllow[] = [];
    const numeric = resolvePorts(
      specs.filter((s) => !isNamed(s)),
      undefined,
    );
    if (numeric.length) out.push(withPorts(anyPeer ? undefined : [...ipPeers, ...pods.map(podPeer)], numeric));
    const named = specs.filter(isNamed);
    const targets = anyPeer ? view.pods : pods;
    for (const p of targets) {
      const ports = resolvePorts(named, p);
      if (ports.length) out.push(withPorts([podPeer(p)], ports));
    }
    return out;
  }
  const ports = resolvePorts(specs, direction === 'ingress' ? local : undefined);
  if (ports.length === 0) return [];
  return [withPorts(anyPeer ? undefined : [...ipPeers, ...pods.map(podPeer)], ports)];
}

const appliesTo = (pol: KubeNetworkPolicy, type: 'Ingress' | 'Egress'): boolean => {
  const types = pol.spec?.policyTypes;
  if (types?.length) return types.includes(type);
  return type === 'Ingress' || (pol.spec?.egress?.length ?? 0) > 0;
};

/** Allows without a peer list or port list compare as strings: sorted so equal policies give equal JSON. */
function normalize(allows: PolicyAllow[]): PolicyAllow[] {
  const norm = allows
    .filter((a) => !a.peers || a.peers.length > 0)
    .map((a) => ({
      ...(a.peers
        ? {
            peers: [...new Map(a.peers.map((p) => [JSON.stringify(p), p])).values()].sort((x, y) =>
              x.cidr.localeCompare(y.cidr),
            ),
          }
        : {}),
      ...(a.ports ? { ports: [...a.ports].sort((x, y) => JSON.stringify(x).localeCompare(JSON.stringify(y))) } : {}),
    }));
  return [...new Map(norm.map((a) => [JSON.stringify(a), a])).values()].sort((x, y) =>
    JSON.stringify(x).localeCompare(JSON.stringify(y)),
  );
}

/** For each node that runs pods, what it enforces (nodes without pods are absent). */
export function resolveNetworkPolicies(
  policies: Iterable<KubeNetworkPolicy>,
  pods: Iterable<KubePod>,
  namespaces: Iterable<KubeNamespace>,
): Map<string, NodePolicy> {
  const view = new ClusterView(pods, namespaces);
  const byNamespace = new Map<string, KubeNetworkPolicy[]>();
  for (const p of policies) {
    const ns = p.metadata.namespace ?? 'default';
    byNamespace.set(ns, [...(byNamespace.get(ns) ?? []), p]);
  }
  const nodes = new Map<string, NodePolicy>();
  for (const pod of view.pods) {
    const node = pod.spec?.nodeName;
    if (!node) continue;
    const ns = pod.metadata.namespace ?? 'default';
    const entry: PodPolicy = { pod: `${ns}/${pod.metadata.name}`, ip: pod.status.podIP };
    for (const pol of byNamespace.get(ns) ?? []) {
      if (!selects(pol.spec?.podSelector, pod.metadata.labels)) continue;
      if (appliesTo(pol, 'Ingress')) {
        entry.ingress ??= [];
        for (const r of pol.spec?.ingress ?? [])
          entry.ingress.push(...ruleAllows(view, ns, r.from, r.ports, pod, 'ingress'));
      }
      if (appliesTo(pol, 'Egress')) {
        entry.egress ??= [];
        for (const r of pol.spec?.egress ?? [])
          entry.egress.push(...ruleAllows(view, ns, r.to, r.ports, pod, 'egress'));
      }
    }
    if (entry.ingress) entry.ingress = normalize(entry.ingress);
    if (entry.egress) entry.egress = normalize(entry.egress);
    const n = nodes.get(node) ?? { pods: [] };
    if (entry.ingress || entry.egress) n.pods.push(entry);
    nodes.set(node, n);
  }
  for (const n of nodes.values()) n.pods.sort((a, b) => a.pod.localeCompare(b.pod));
  return nodes;
}

// ---- the per-node object ----

export function netpolConfigMap(
  node: string,
  policy: NodePolicy,
  owner: { uid: string },
): KubeManifest & { data: Record<string, string> } {
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: netpolConfigMapName(node),
      namespace: NETPOL_NAMESPACE,
      labels: { 'app.kubernetes.io/managed-by': 'kctl', 'app.kubernetes.io/component': NETPOL_COMPONENT },
      // Removed with its Node.
      ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: node, uid: owner.uid }],
    },
    data: { policy: JSON.stringify(policy) },
  };
}

/** The per-node object's policy; throws naming what is wrong (the node keeps what it enforces). */
export function parseNodePolicy(data: Record<string, string> | undefined): NodePolicy {
  const raw = data?.policy;
  if (raw === undefined) throw new Error('network policy: the ConfigMap has no policy key');
  let v: NodePolicy;
  try {
    v = JSON.parse(raw) as NodePolicy;
  } catch (err) {
    throw new Error(`network policy: the policy key is not JSON (${messageOf(err)})`, { cause: err });
  }
  if (!v || !Array.isArray(v.pods)) throw new Error('network policy: policy.pods is not a list');
  for (const p of v.pods)
    if (typeof p.ip !== 'string' || !/^\d+\.\d+\.\d+\.\d+$/.test(p.ip))
      throw new Error(`network policy: pod ${p.pod} has no IPv4 address`);
  return v;
}
