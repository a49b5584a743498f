// Which routing identifiers an agent may claim. kube-apiserver dials a kubelet by one of its
// Node's addresses; with the destHost strategy the agent that claims that address gets the
// dial. So a claim is a request for another host's traffic, and only the Node that reports an
// address (or a name) may have it. The serving-certificate approver asks the same question of a
// CSR's SANs: `unownedBy` is the one rule for both.
import { canonicalIp } from '../base/addresses.ts';
import type { AgentIdentity } from './auth.ts';
import type { AgentIdentifiers } from './protocol.ts';

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
}

/** A live view of the cluster's Nodes (the controller keeps one from a watch). */
export interface NodeDirectory {
  /** False until the first list arrived: claims are judged again once it has. */
  readonly synced: boolean;
  get(name: string): NodeRecord | undefined;
  /** Names of the Nodes that report this IP address or DNS name. */
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

/** Everything a Node owns: its name, its DNS-type addresses and its IP addresses. */
export function ownedBy(node: NodeRecord): string[] {
  return [node.name, ...node.addresses.map((a) => a.address)].map(canonicalIdentifier);
}

/**
 * The rule shared by agent claims and kubelet serving CSRs: which of these names and addresses
 * the Node does not own (DNS names must be its name or a Hostname/DNS address, IPs one of its
 * IP addresses). Empty means all are the Node's.
 */
export function unownedBy(node: NodeRecord, names: string[], ips: string[]): string[] {
  const dns = new Set([node.name, ...node.addresses.filter((a) => !isIpType(a.type)).map((a) => a.address)].map(canonicalIdentifier));
  const ipSet = new Set(node.addresses.filter((a) => isIpType(a.type)).map((a) => canonicalIdentifier(a.address)));
  return [...names.filter((n) => !dns.has(canonicalIdentifier(n))), ...ips.filter((ip) => !ipSet.has(canonicalIdentifier(ip)))];
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
 * - a service-account agent that is not trusted: nothing (it serves only the `default` strategy);
 * - a trusted agent also: CIDRs, default-route, and any other name or address, unless the agent
 *   of the Node that reports it claims it too: that Node's agent wins.
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
      const why = ownershipProblem({ value: v, isName: kind === 'host', own, node, nodes, trusted, ownerAgent });
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

function ownershipProblem(c: ClaimContext): string | undefined {
  const { value, isName, own, node, nodes } = c;
  if (isName && own !== undefined && canonicalIdentifier(value) === canonicalIdentifier(own)) return undefined; // the certificate says so
  if (node && unownedBy(node, isName ? [value] : [], isName ? [] : [value]).length === 0) return undefined;
  const owners = nodes.owners(value).filter((n) => n !== own);
  if (c.trusted) {
    const winner = owners.length > 0 ? c.ownerAgent(value) : undefined;
    return winner === undefined ? undefined : `agent ${winner} of node ${owners.join(', ')}, which reports it, claims it too`;
  }
  if (own === undefined) return 'a service-account agent claims nothing unless listed in spec.konnectivity.trustedAgents';
  if (owners.length > 0) return `reported by node ${owners.join(', ')}`;
  if (!node) return nodes.synced ? `node ${own} is not registered` : 'waiting for the Node list';
  return `node ${own} does not report it`;
}
