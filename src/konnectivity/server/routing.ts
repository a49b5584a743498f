// Which agent gets a dial: the proxy strategies in the order given (destHost, defaultRoute,
// default), one backend per agent id, and an agent on its way out (DRAIN) only when no other
// can take the dial. The broker (broker.ts) asks; the agents' identifiers are what their
// claims kept (claims.ts), held on each AgentBackend (tunnel.ts).
import { BlockList, isIPv4, isIPv6 } from 'node:net';
import { joinHostPort } from '../../base/addresses.ts';
import type { AgentIdentifiers } from '../wire/protocol.ts';
import type { AgentBackend } from './tunnel.ts';

export type ProxyStrategy = 'destHost' | 'defaultRoute' | 'default';

interface Cidr {
  bits: number;
  list: BlockList;
}

/** Each identifier set's CIDRs, longest prefix first; built on the first CIDR question after a verdict. */
const cidrsOf = new WeakMap<AgentIdentifiers, Cidr[]>();

function cidrs(ids: AgentIdentifiers): Cidr[] {
  let out = cidrsOf.get(ids);
  if (out) return out;
  out = [];
  for (const c of ids.cidr) {
    const [net, bits] = c.split('/');
    if (net === undefined || bits === undefined) continue;
    try {
      const list = new BlockList();
      list.addSubnet(net, Number(bits), isIPv6(net) ? 'ipv6' : 'ipv4');
      out.push({ bits: Number(bits), list });
    } catch {
      // a malformed cidr identifier matches nothing
    }
  }
  out.sort((a, b) => b.bits - a.bits);
  cidrsOf.set(ids, out);
  return out;
}

/**
 * destHost strategy: the dial host is one of the agent's names or addresses ('exact'), or lies
 * in one of its CIDRs (the prefix length of the longest that holds it), or neither (null).
 */
export function destHostMatch(a: AgentBackend, host: string): 'exact' | number | null {
  if (a.namesExactly(host)) return 'exact';
  const ids = a.identifiers;
  if (ids.cidr.length === 0 || !(isIPv4(host) || isIPv6(host))) return null;
  const family = isIPv6(host) ? 'ipv6' : 'ipv4';
  return cidrs(ids).find((c) => c.list.check(host, family))?.bits ?? null;
}

/** Agents that name `host` exactly; else those whose CIDR holding it is the longest (a node's pod CIDR beats a gateway's wide one). */
function destHostCandidates(ready: AgentBackend[], host: string): AgentBackend[] {
  const exact: AgentBackend[] = [];
  let cidr: AgentBackend[] = [];
  let longest = -1;
  for (const a of ready) {
    const how = destHostMatch(a, host);
    if (how === 'exact') exact.push(a);
    else if (how !== null && how >= longest) {
      if (how > longest) cidr = [];
      longest = how;
      cidr.push(a);
    }
  }
  return exact.length > 0 ? exact : cidr;
}

/**
 * One backend per agent id: its oldest stream, as upstream does (backends[agentID][0]),
 * preferring one that is not suspected dead and not draining. A newer stream of the same agent is
 * usually a duplicate the agent drops as soon as it reads serverid (HA resync after a server loss,
 * discovery behind a load balancer); a dial sent on it would fail with "agent disconnected before
 * answering". But after a partition the agent's new stream is the live one: the older one is then
 * suspect (agent-streams.ts) until it answers a ping.
 */
function readyAgents(agents: Iterable<AgentBackend>): AgentBackend[] {
  const byId = new Map<string, AgentBackend>();
  const rank = (a: AgentBackend): number => (a.suspect ? 2 : 0) + (a.draining ? 1 : 0);
  for (const a of agents) {
    if (a.gone) continue;
    const first = byId.get(a.id);
    if (!first || rank(a) < rank(first)) byId.set(a.id, a);
  }
  return [...byId.values()];
}

/**
 * The ready_backends gauge, counted as upstream counts each strategy's backends: destHost by
 * the distinct names and addresses agents claim, the others by distinct agent ids.
 */
export function agentsByStrategy(
  agents: Iterable<AgentBackend>,
  strategies: ProxyStrategy[],
): Map<ProxyStrategy, number> {
  const ready = readyAgents(agents);
  const out = new Map<ProxyStrategy, number>();
  for (const s of strategies) {
    if (s === 'destHost')
      out.set(
        s,
        new Set(ready.flatMap((a) => [...a.identifiers.host, ...a.identifiers.ipv4, ...a.identifiers.ipv6])).size,
      );
    else
      out.set(
        s,
        new Set((s === 'defaultRoute' ? ready.filter((a) => a.identifiers.defaultRoute) : ready).map((a) => a.id)).size,
      );
  }
  return out;
}

/** The agent a dial to `host` goes to, or null when no strategy finds one. */
export function pickAgent(
  agents: Iterable<AgentBackend>,
  strategies: ProxyStrategy[],
  host: string,
): AgentBackend | null {
  const ready = readyAgents(agents);
  for (const s of strategies) {
    const candidates =
      s === 'destHost'
        ? destHostCandidates(ready, host)
        : s === 'defaultRoute'
          ? ready.filter((a) => a.identifiers.defaultRoute)
          : ready;
    if (candidates.length === 0) continue;
    // DRAIN: an agent on its way out only gets dials nobody else can take.
    const live = candidates.filter((a) => !a.draining);
    const pool = live.length > 0 ? live : candidates;
    return pool[Math.floor(Math.random() * pool.length)] as AgentBackend;
  }
  return null;
}

/**
 * The address an agent is sent for a dial to `host:port`. kube-apiserver dials a kubelet by its
 * node's name (the Hostname address); an agent that dials its own name itself (node-name/1) gets
 * the dial as it came, another agent of that node (an older kctl worker, an upstream agent with a
 * node certificate) gets the node's own address in its place: the first address its claims kept,
 * which the ownership rule gave that node. Undefined: the agent could not reach the name.
 */
export function dialAddress(agent: AgentBackend, host: string, port: number, address: string): string | undefined {
  const node = agent.identity.node?.toLowerCase();
  if (node === undefined || host.toLowerCase() !== node || agent.dialsOwnName) return address;
  const ip = agent.identifiers.ipv4[0] ?? agent.identifiers.ipv6[0];
  return ip === undefined ? undefined : joinHostPort(ip, port);
}

/** Why no agent takes a dial to `host`: what follows "No agent available: ". */
export function noAgentMessage(host: string, agents: number, serverId: string, strategies: ProxyStrategy[]): string {
  const server = `konnectivity server ${serverId}`;
  if (agents === 0) return `no agent is connected to ${server}`;
  // Without `default` a dial goes only to an agent that may serve its host: never to "any agent".
  if (!strategies.includes('default'))
    return `no agent may serve ${host} (${agents} agent${agents === 1 ? '' : 's'} connected to ${server}; strategies ${strategies.join(',')})`;
  return `none of the ${agents} agents connected to ${server} matches ${host} (strategies ${strategies.join(',')})`;
}
