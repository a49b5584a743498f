// Which routing identifiers an agent may claim. kube-apiserver dials a kubelet by one of its
// Node's addresses; with the destHost strategy the agent that claims that address gets the dial.
// So a claim is a request for another host's traffic: an agent keeps only what the ownership rule
// (base/ownership.ts, shared with the serving-CSR approver and the pod network) gives its node.
import {
  canonicalIdentifier,
  nobodysProblem,
  ownershipProblem,
  type NodeDirectory,
  type NodeRecord,
} from '../../base/ownership.ts';
import type { AgentIdentity } from './auth.ts';
import type { AgentIdentifiers } from '../wire/protocol.ts';

/** Agents allowed more than their own node's identifiers (config spec.konnectivity.trustedAgents). */
export interface TrustedAgents {
  /** Node names whose certificate agents may claim CIDRs, default-route and unowned addresses. */
  nodes: string[];
  /** Kubernetes users (system:serviceaccount:NS:NAME) whose token agents may do the same. */
  users: string[];
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
  const dropped = claimed.host
    .filter((h) => h !== own)
    .map((h) => ({ claim: `host=${h}`, reason: `not node ${own}'s name` }));
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
  if (!c.trusted)
    return problem ?? 'a service-account agent claims nothing unless listed in spec.konnectivity.trustedAgents';
  // Trust widens a claim to addresses no Node keeps, never to the control plane's or virtual ones.
  const v = canonicalIdentifier(value);
  const nobodys = nobodysProblem(v, isName, node, nodes.reserved);
  if (nobodys) return nobodys;
  const owners = nodes.owners(v).filter((n) => n !== own);
  const winner = owners.length > 0 ? c.ownerAgent(v) : undefined;
  return winner === undefined
    ? undefined
    : `agent ${winner} of node ${owners.join(', ')}, which reports it, claims it too`;
}
