// Which routing identifiers an agent may claim, and which names and addresses a node may own.
// kube-apiserver dials a kubelet by one of its Node's addresses; with the destHost strategy the
// agent that claims that address gets the dial. So a claim is a request for another host's
// traffic, and a serving certificate for an address lets its holder pose as whatever lives there.
// `ownershipProblem` is the one rule for both the tunnel claims and the serving-CSR approver: an
// address or name is a node's only if its Node reports it, no other Node reported it first, and
// it is not the control plane's or the cluster's virtual space (reserved).
import { canonicalIp, cidrContains } from '../../base/addresses.ts';
import type { AgentIdentity } from './auth.ts';
import type { AgentIdentifiers } from '../wire/protocol.ts';

export interface NodeAddress {
  type: string;
  address: string;
}

/** What a Node object says about itself: metadata.name, status.addresses and spec.podCIDRs. */
export interface NodeRecord {
  name: string;
  addresses: NodeAddress[];
  /** The pod networks kube-controller-manager gave the Node: its pods' IPs are there. */
  podCIDRs?: string[];
  /** The port its kubelet serves on (status.daemonEndpoints), when it says. */
  kubeletPort?: number;
}

/** What no node may own, whatever its Node reports. */
export interface ReservedSpace {
  /** Whether a canonical address or lower-case name is a controller's (config, leases, certificates). */
  isController(value: string): boolean;
  /** The cluster's Service networks: a Service IP belongs to no node. */
  serviceCIDRs: readonly string[];
  /** The cluster's pod networks: a node owns only the part kube-controller-manager gave it. */
  podCIDRs: readonly string[];
}

/** A live view of the cluster's Nodes (the controller keeps one from a watch). */
export interface NodeDirectory {
  /** False until the first list arrived: claims are judged again once it has. */
  readonly synced: boolean;
  /**
   * The control plane's addresses and the cluster's virtual networks; with it, loopback,
   * link-local, unspecified and multicast addresses are nobody's too. `kctl controller` always
   * sets it; without it (tests, tools) only the Nodes decide.
   */
  readonly reserved?: ReservedSpace;
  get(name: string): NodeRecord | undefined;
  /**
   * Names of the Nodes that report this IP address or DNS name, the one that keeps it first: the
   * Node of that name for a name, else the first to report it (while it keeps reporting it).
   */
  owners(nameOrIp: string): string[];
  /** Runs after every change (and after the first list); returns an unsubscribe function. */
  onChange(listener: () => void): () => void;
}

/** Agents allowed more than their own node's identifiers (config spec.konnectivity.trustedAgents). */
export interface TrustedAgents {
  /** Node names whose certificate agents may claim CIDRs, default-route and unowned addresses. */
  nodes: string[];
  /** Kubernetes users (system:serviceaccount:NS:NAME) whose token agents may do the same. */
  users: string[];
}

/** One spelling per identifier: lower-case names, canonical IPs ("0:0::1" is "::1"). */
export function canonicalIdentifier(v: string): string {
  return canonicalIp(v) ?? v.toLowerCase();
}

const isIpType = (t: string): boolean => /IP$/.test(t);

/** Everything a Node reports about itself: its name, its DNS-type addresses and its IP addresses. */
export function ownedBy(node: NodeRecord): string[] {
  return [node.name, ...node.addresses.map((a) => a.address)].map(canonicalIdentifier);
}

/** Address ranges that never lead to one particular node, with the words a reason uses. */
const SPECIAL_RANGES: { cidr: string; what: string }[] = [
  { cidr: '127.0.0.0/8', what: 'a loopback address' },
  { cidr: '::1/128', what: 'a loopback address' },
  { cidr: '169.254.0.0/16', what: 'a link-local address' },
  { cidr: 'fe80::/10', what: 'a link-local address' },
  { cidr: '0.0.0.0/8', what: 'an unspecified address' },
  { cidr: '::/128', what: 'an unspecified address' },
  { cidr: '224.0.0.0/4', what: 'a multicast address' },
  { cidr: 'ff00::/8', what: 'a multicast address' },
  { cidr: '255.255.255.255/32', what: 'the broadcast address' },
  // An IPv4 address spelled as IPv6 reaches the IPv4 host: it would dodge every rule above.
  { cidr: '::ffff:0:0/96', what: 'an IPv4-mapped IPv6 address' },
];

/** Why no node may own this (canonical) IP or name whatever it reports, or undefined. */
function reservedProblem(value: string, isName: boolean, node: NodeRecord | undefined, reserved: ReservedSpace | undefined): string | undefined {
  if (!reserved) return undefined; // a directory without one (tests, tools) judges by the Nodes alone
  // The most telling reason first: a Service IP is also in kube-apiserver's certificate.
  if (isName) {
    if (value === 'localhost' || value.endsWith('.localhost')) return 'a loopback name';
    return reserved.isController(value) ? "a controller's name" : undefined;
  }
  const special = SPECIAL_RANGES.find((r) => cidrContains(r.cidr, value));
  if (special) return special.what;
  const service = reserved.serviceCIDRs.find((c) => cidrContains(c, value));
  if (service) return `inside the service CIDR ${service}`;
  const pods = reserved.podCIDRs.find((c) => cidrContains(c, value));
  if (pods && !(node?.podCIDRs ?? []).some((c) => cidrContains(c, value)))
    return `inside the pod CIDR ${pods} but not node ${node?.name ?? '(unregistered)'}'s own`;
  return reserved.isController(value) ? "a controller's address" : undefined;
}

/** Why a (canonical) value can be nobody's whoever claims it: not an IP where one is due, or reserved. */
function nobodysProblem(v: string, isName: boolean, node: NodeRecord | undefined, reserved: ReservedSpace | undefined): string | undefined {
  if (!isName && canonicalIp(v) === null) return 'not an IP address';
  return reservedProblem(v, isName, node, reserved);
}

/**
 * The one ownership rule, shared by agent claims and kubelet serving CSRs: why node `nodeName`
 * (its Node `node`, undefined when not registered) may not own `value` (a DNS name when `isName`,
 * else an IP), or undefined when it does. A node owns its own name, and the names (Hostname,
 * DNS addresses) and IPs its Node reports, unless another Node reported them first or they are
 * reserved (ReservedSpace, loopback, link-local, unspecified, multicast).
 */
export function ownershipProblem(
  nodeName: string,
  node: NodeRecord | undefined,
  value: string,
  isName: boolean,
  nodes: NodeDirectory,
): string | undefined {
  const v = canonicalIdentifier(value);
  const nobodys = nobodysProblem(v, isName, node, nodes.reserved);
  if (nobodys) return nobodys;
  const own = canonicalIdentifier(nodeName);
  if (isName && v === own) return undefined; // its certificate (or its CSR's requester) says so
  const reports = node !== undefined && node.addresses.some((a) => isIpType(a.type) !== isName && canonicalIdentifier(a.address) === v);
  const owners = nodes.owners(v);
  if (!reports) {
    const others = owners.filter((n) => n !== node?.name);
    if (others.length > 0) return `reported by node ${others.join(', ')}`;
    if (!node) return nodes.synced ? `node ${nodeName} is not registered` : 'waiting for the Node list';
    return `node ${nodeName} does not report it`;
  }
  const first = owners[0];
  if (first !== undefined && first !== node.name) return `reported first by node ${first} (conflict)`;
  return undefined;
}

/** What a node may not own among these names and IPs, each with its reason. Empty means all are the node's. */
export function unownedBy(nodeName: string, node: NodeRecord | undefined, names: string[], ips: string[], nodes: NodeDirectory): DroppedValue[] {
  const out: DroppedValue[] = [];
  for (const [values, isName] of [
    [names, true],
    [ips, false],
  ] as const) {
    for (const value of values) {
      const reason = ownershipProblem(nodeName, node, value, isName, nodes);
      if (reason !== undefined) out.push({ value, reason });
    }
  }
  return out;
}

export interface DroppedValue {
  value: string;
  reason: string;
}

export interface DroppedClaim {
  /** As the agent sent it: `ipv4=10.0.0.5`, `cidr=10.0.0.0/24`, `default-route=true`. */
  claim: string;
  reason: string;
}

export interface ClaimVerdict {
  accepted: AgentIdentifiers;
  dropped: DroppedClaim[];
}

export function isTrusted(identity: AgentIdentity, trusted: TrustedAgents | undefined): boolean {
  if (!trusted) return false;
  if (identity.method === 'certificate') return identity.node !== undefined && trusted.nodes.includes(identity.node);
  return trusted.users.includes(identity.user);
}

/**
 * Without a Node directory (a server with no API access): a node certificate vouches for its own
 * node name only; addresses, CIDRs and default-route are taken as claimed, as upstream does.
 */
export function judgeWithoutNodes(identity: AgentIdentity, claimed: AgentIdentifiers): ClaimVerdict {
  if (identity.method !== 'certificate' || identity.node === undefined) return { accepted: claimed, dropped: [] };
  const own = identity.node.toLowerCase();
  const dropped = claimed.host.filter((h) => h !== own).map((h) => ({ claim: `host=${h}`, reason: `not node ${own}'s name` }));
  return { accepted: { ...claimed, host: claimed.host.filter((h) => h === own) }, dropped };
}

/** The agent (other than the one judged) whose own Node reports `value` and that claims it too, if one is connected. */
export type OwnerAgent = (value: string) => string | undefined;

/**
 * The claims an agent keeps, given the Nodes (and, for trusted agents, the other agents) as they are now:
 * - a node-certificate agent: its node's name, and the names and addresses its Node reports;
 *   it also serves its Node's pod CIDRs without claiming them, so a dial to a pod (a webhook, an
 *   aggregated API) goes to the agent on the node that runs the pod, not to any agent;
 * - a service-account agent that is not trusted: nothing (it serves only the `default` strategy,
 *   which `kctl controller` does not run);
 * - a trusted agent also: CIDRs, default-route, and any other name or address that is not reserved,
 *   unless the agent of the Node that reports it claims it too: that Node's agent wins.
 */
export function judgeClaims(
  identity: AgentIdentity,
  claimed: AgentIdentifiers,
  nodes: NodeDirectory,
  trusted: boolean,
  ownerAgent: OwnerAgent = () => undefined,
): ClaimVerdict {
  const dropped: DroppedClaim[] = [];
  const own = identity.method === 'certificate' ? identity.node : undefined;
  const node = own === undefined ? undefined : nodes.get(own);
  const keep = (kind: 'host' | 'ipv4' | 'ipv6', values: string[]): string[] =>
    values.filter((v) => {
      const why = claimProblem({ value: v, isName: kind === 'host', own, node, nodes, trusted, ownerAgent });
      if (why) dropped.push({ claim: `${kind}=${v}`, reason: why });
      return why === undefined;
    });
  const onlyTrusted = 'only agents listed in spec.konnectivity.trustedAgents may claim it';
  if (!trusted) {
    for (const c of claimed.cidr) dropped.push({ claim: `cidr=${c}`, reason: onlyTrusted });
    if (claimed.defaultRoute) dropped.push({ claim: 'default-route=true', reason: onlyTrusted });
  }
  const accepted: AgentIdentifiers = {
    host: keep('host', claimed.host),
    ipv4: keep('ipv4', claimed.ipv4),
    ipv6: keep('ipv6', claimed.ipv6),
    cidr: [...new Set([...(trusted ? claimed.cidr : []), ...(node?.podCIDRs ?? [])])],
    defaultRoute: trusted && claimed.defaultRoute,
  };
  return { accepted, dropped };
}

interface ClaimContext {
  value: string;
  isName: boolean;
  own: string | undefined;
  node: NodeRecord | undefined;
  nodes: NodeDirectory;
  trusted: boolean;
  ownerAgent: OwnerAgent;
}

/** Why the agent may not claim this value: the ownership rule for its node, then what trust adds. */
function claimProblem(c: ClaimContext): string | undefined {
  const { value, isName, own, node, nodes } = c;
  const problem = own === undefined ? undefined : ownershipProblem(own, node, value, isName, nodes);
  if (own !== undefined && problem === undefined) return undefined;
  if (!c.trusted) return problem ?? 'a service-account agent claims nothing unless listed in spec.konnectivity.trustedAgents';
  // Trust widens a claim to addresses no Node keeps, never to the control plane's or virtual ones.
  const v = canonicalIdentifier(value);
  const nobodys = nobodysProblem(v, isName, node, nodes.reserved);
  if (nobodys) return nobodys;
  const owners = nodes.owners(v).filter((n) => n !== own);
  const winner = owners.length > 0 ? c.ownerAgent(v) : undefined;
  return winner === undefined ? undefined : `agent ${winner} of node ${owners.join(', ')}, which reports it, claims it too`;
}
