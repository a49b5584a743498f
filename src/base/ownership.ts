// Who owns a name, an address or a pod range of the node network: the one rule for every consumer
// (the tunnel's claims, the serving-CSR approver, and the pod network's routes, VXLAN and
// WireGuard peers on every worker). What the cluster assigned (a pod range from
// kube-controller-manager's allocator) or a credential proves (a certificate's node name) decides;
// what a Node reports about itself decides only where nobody else reports the same and nothing
// reserved (the control plane, the cluster's virtual networks, loopback, link-local) is at stake.
import { canonicalIp, cidrContains, cidrRange } from './addresses.ts';

export interface NodeAddress {
  type: string;
  address: string;
}

/** What a Node object says about itself: metadata.name, status.addresses and spec.podCIDRs. */
export interface NodeRecord {
  name: string;
  addresses: NodeAddress[];
  /**
   * The pod networks kube-controller-manager gave the Node: its pods' IPs are there. From a
   * NodeDirectory, only the ranges judgePodRanges leaves it (never what the Node merely says).
   */
  podCIDRs?: string[];
  /** The port its kubelet serves on (status.daemonEndpoints), when it says. */
  kubeletPort?: number;
  /**
   * Addresses an admin said this node keeps when other Nodes report them too (the annotation
   * KEEPS_ADDRESSES_ANNOTATION, which kctl's admission policy lets no node write), canonical.
   */
  keeps?: string[];
}

/** On a Node, set by an admin: the addresses (comma-separated) this node keeps though others report them too. */
export const KEEPS_ADDRESSES_ANNOTATION = 'kctl.dev/keeps-addresses';

/** The addresses a Node's annotations say an admin gave it, canonical. */
export function keptAddresses(annotations: Record<string, string> | undefined): string[] {
  const v = annotations?.[KEEPS_ADDRESSES_ANNOTATION];
  return v
    ? v
        .split(',')
        .map((a) => canonicalIdentifier(a.trim()))
        .filter((a) => a !== '')
    : [];
}

/** What no node may own, whatever its Node reports. */
export interface ReservedSpace {
  /** Whether a canonical address or lower-case name is a controller's (config, leases, certificates). */
  isController(value: string): boolean;
  /** The cluster's Service networks: a Service IP belongs to no node. */
  serviceCIDRs: readonly string[];
  /** The cluster's pod networks: a node owns only the part kube-controller-manager gave it. */
  podCIDRs: readonly string[];
  /** The prefix length of each node's pod range (judgePodRanges); undefined: any size inside podCIDRs. */
  podRangeBits?: number;
  /** The address every node serves the API on for its pods (spec.frontDoor.nodeLocalAddress): each node's own, never one node's. */
  nodeLocal?: string;
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
   * Names of the Nodes that report this IP address or DNS name; for a name, the Node of that name
   * first (a Node's own name is its own). More than one: a conflict (ownershipProblem).
   */
  owners(nameOrIp: string): string[];
  /** Runs after every change (and after the first list); returns an unsubscribe function. */
  onChange(listener: () => void): () => void;
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

/** Which special range an address is in (loopback, link-local, ...), in a reason's words; undefined for none. */
export const specialRange = (ip: string): string | undefined =>
  SPECIAL_RANGES.find((r) => cidrContains(r.cidr, ip))?.what;

/** Why no node may own this (canonical) IP or name whatever it reports, or undefined. */
function reservedProblem(
  value: string,
  isName: boolean,
  node: NodeRecord | undefined,
  reserved: ReservedSpace | undefined,
): string | undefined {
  if (!reserved) return undefined; // a directory without one (tests, tools) judges by the Nodes alone
  // The most telling reason first: a Service IP is also in kube-apiserver's certificate.
  if (isName) {
    if (value === 'localhost' || value.endsWith('.localhost')) return 'a loopback name';
    return reserved.isController(value) ? "a controller's name" : undefined;
  }
  const special = specialRange(value);
  if (special) return special;
  if (value === reserved.nodeLocal) return "the node-local API address (every node's own)";
  const service = reserved.serviceCIDRs.find((c) => cidrContains(c, value));
  if (service) return `inside the service CIDR ${service}`;
  const pods = reserved.podCIDRs.find((c) => cidrContains(c, value));
  if (pods && !(node?.podCIDRs ?? []).some((c) => cidrContains(c, value)))
    return `inside the pod CIDR ${pods} but not node ${node?.name ?? '(unregistered)'}'s own`;
  return reserved.isController(value) ? "a controller's address" : undefined;
}

/** Why a (canonical) value can be nobody's whoever claims it: not an IP where one is due, or reserved. */
export function nobodysProblem(
  v: string,
  isName: boolean,
  node: NodeRecord | undefined,
  reserved: ReservedSpace | undefined,
): string | undefined {
  if (!isName && canonicalIp(v) === null) return 'not an IP address';
  // A wildcard names every host under it: no node owns that, whatever it reports.
  if (isName && v.includes('*')) return 'a wildcard name';
  return reservedProblem(v, isName, node, reserved);
}

/**
 * How an IP several Nodes report is judged: `nobody` (routing: the tunnel, the pod network) or
 * `each` (a serving certificate: kube-apiserver dials kubelets by name and routing gives a shared
 * address to nobody, so naming it in a certificate draws no traffic; two nodes behind two NATs
 * with the same address each still get one). A name several Nodes report is nobody's either way.
 */
export type Sharing = 'nobody' | 'each';

/**
 * The one ownership rule, shared by agent claims, kubelet serving CSRs and the pod network: why
 * node `nodeName` (its Node `node`, undefined when not registered) may not own `value` (a DNS name
 * when `isName`, else an IP), or undefined when it does. A node owns its own name, and the names
 * (Hostname, DNS addresses) and IPs its Node reports, unless they are reserved (ReservedSpace,
 * loopback, link-local, unspecified, multicast) or another Node reports them too: then nobody owns
 * them (no first-reporter privilege) until an admin resolves it, by deleting the Node that lies or
 * by naming the keeper (KEEPS_ADDRESSES_ANNOTATION on its Node).
 */
export function ownershipProblem(
  nodeName: string,
  node: NodeRecord | undefined,
  value: string,
  isName: boolean,
  nodes: NodeDirectory,
  sharing: Sharing = 'nobody',
): string | undefined {
  const v = canonicalIdentifier(value);
  const nobodys = nobodysProblem(v, isName, node, nodes.reserved);
  if (nobodys) return nobodys;
  const own = canonicalIdentifier(nodeName);
  if (isName && v === own) return undefined; // its certificate (or its CSR's requester) says so
  const reports =
    node !== undefined &&
    node.addresses.some((a) => isIpType(a.type) !== isName && canonicalIdentifier(a.address) === v);
  const others = nodes.owners(v).filter((n) => n !== node?.name);
  if (!reports) {
    if (others.length > 0) return `reported by node ${others.join(', ')}`;
    if (!node) return nodes.synced ? `node ${nodeName} is not registered` : 'waiting for the Node list';
    return `node ${nodeName} does not report it`;
  }
  // A name is never shared: kube-apiserver verifies kubelets by name.
  const reporters = [node, ...others.map((n) => nodes.get(n) ?? { name: n })];
  return conflictProblem(v, node.name, reporters, sharing === 'each' && !isName);
}

/** A Node that reports a value, and the addresses an admin said it keeps (NodeRecord.keeps). */
export type Reporter = Pick<NodeRecord, 'name' | 'keeps'>;

/** The one Node among `reporters` an admin said keeps `v` (KEEPS_ADDRESSES_ANNOTATION); undefined when none or several. */
export function keeperOf(v: string, reporters: readonly Reporter[]): string | undefined {
  const keepers = reporters.filter((r) => r.keeps?.includes(v));
  return keepers.length === 1 ? keepers[0]!.name : undefined;
}

/**
 * Why node `name`, one of the Nodes that report `v` (`reporters`, itself included), may not have
 * it, or undefined: alone it may; with others only as the keeper an admin named, or, when
 * `shared` and no other is the keeper, alongside them (a serving certificate's IP).
 */
export function conflictProblem(
  v: string,
  name: string,
  reporters: readonly Reporter[],
  shared = false,
): string | undefined {
  const others = reporters.filter((r) => r.name !== name).map((r) => r.name);
  if (others.length === 0) return undefined;
  const keeper = keeperOf(v, reporters);
  if (keeper === name) return undefined;
  if (keeper !== undefined) return `kept by node ${keeper} (${KEEPS_ADDRESSES_ANNOTATION}, set by an admin)`;
  return shared
    ? undefined
    : `also reported by node ${others.join(', ')} (conflict: nobody's until an admin resolves it)`;
}

/** What a node may not own among these names and IPs, each with its reason. Empty means all are the node's. */
export function unownedBy(
  nodeName: string,
  node: NodeRecord | undefined,
  names: string[],
  ips: string[],
  nodes: NodeDirectory,
  sharing: Sharing = 'nobody',
): DroppedValue[] {
  const out: DroppedValue[] = [];
  for (const [values, isName] of [
    [names, true],
    [ips, false],
  ] as const) {
    for (const value of values) {
      const reason = ownershipProblem(nodeName, node, value, isName, nodes, sharing);
      if (reason !== undefined) out.push({ value, reason });
    }
  }
  return out;
}

export interface DroppedValue {
  value: string;
  reason: string;
}

/** The prefix length kctl has kube-controller-manager give each node's pod range (--node-cidr-mask-size). */
export const NODE_POD_RANGE_BITS = 24;

/** What the cluster lets kube-controller-manager hand out: its pod CIDRs, and the size of each node's range when known. */
export type PodRangeSpace = Pick<ReservedSpace, 'podCIDRs' | 'podRangeBits'>;

export interface RefusedPodRange {
  node: string;
  range: string;
  reason: string;
}

export interface PodRangeVerdict {
  /** Node name -> the pod ranges traffic may be routed to it for (nodes without one are absent). */
  ranges: Map<string, string[]>;
  /** Every range no node may be routed, with why. */
  refused: RefusedPodRange[];
}

/** Why a range cannot be any node's, whoever holds it; undefined when its shape is one the allocator gives. */
function podRangeShapeProblem(range: string, space: PodRangeSpace | undefined): string | undefined {
  const r = cidrRange(range);
  if (!r) return 'not a network in CIDR form';
  if (!space) return undefined;
  const inside = space.podCIDRs.some((c) => {
    const cluster = cidrRange(c);
    return cluster !== undefined && cluster.family === r.family && cluster.first <= r.first && r.last <= cluster.last;
  });
  if (!inside) return `outside the cluster's pod CIDR ${space.podCIDRs.join(', ')}`;
  if (space.podRangeBits !== undefined && r.bits !== space.podRangeBits)
    return `a /${r.bits}, not the /${space.podRangeBits} kube-controller-manager gives each node`;
  return undefined;
}

/**
 * The pod ranges each node may be routed. kube-controller-manager gives every node one range of
 * the node size inside the cluster's pod CIDR, never one range to two nodes; a range of another
 * size, outside the cluster CIDR, or held by two nodes is nobody's (a node could write its own
 * before kctl's admission policy, an admin still can): the tunnel, routes, VXLAN and WireGuard
 * leave it alone, and a refused range takes nothing from the node whose range it overlaps.
 * Without `space` (a server that knows no cluster config) only overlaps count.
 */
export function judgePodRanges(
  nodes: Iterable<{ name: string; podCIDRs?: readonly string[] }>,
  space?: PodRangeSpace,
): PodRangeVerdict {
  const refused: RefusedPodRange[] = [];
  const shaped: { node: string; range: string; family: number; first: bigint; last: bigint }[] = [];
  for (const n of nodes) {
    for (const range of new Set(n.podCIDRs ?? [])) {
      const why = podRangeShapeProblem(range, space);
      const r = cidrRange(range);
      if (why !== undefined || !r) refused.push({ node: n.name, range, reason: why ?? 'not a network in CIDR form' });
      else shaped.push({ node: n.name, range, family: r.family, first: r.first, last: r.last });
    }
  }
  // In address order, a range that starts before the furthest end so far overlaps its group.
  shaped.sort((a, b) => a.family - b.family || (a.first < b.first ? -1 : a.first > b.first ? 1 : 0));
  const ranges = new Map<string, string[]>();
  const settle = (group: typeof shaped): void => {
    const owners = new Set(group.map((g) => g.node));
    for (const g of group) {
      if (owners.size === 1) ranges.set(g.node, [...(ranges.get(g.node) ?? []), g.range]);
      else {
        const others = group.filter((o) => o.node !== g.node).map((o) => `node ${o.node}'s ${o.range}`);
        refused.push({
          node: g.node,
          range: g.range,
          reason: `overlaps ${others.join(', ')} (nobody's until an admin resolves it)`,
        });
      }
    }
  };
  let group: typeof shaped = [];
  let end = -1n;
  for (const s of shaped) {
    const joins = group.length > 0 && group[0]!.family === s.family && s.first <= end;
    if (!joins) {
      settle(group);
      group = [];
      end = -1n;
    }
    group.push(s);
    if (s.last > end) end = s.last;
  }
  settle(group);
  return { ranges, refused };
}
