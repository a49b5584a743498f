// The kernel VXLAN device of kctl's vxlan pod network mode (the shape flannel's vxlan backend
// made common): one device per node with learning off, and for each other node three entries kctl
// keeps from the cluster's Nodes: a route to its pod CIDR via its VTEP address (onlink), that
// address's MAC (neighbour entry), and where that MAC lives (FDB entry: the node's own address).
// A VTEP's address is the network address of its node's pod CIDR and its MAC is derived from that
// address, so nodes publish nothing beyond what their Node already says.
//
// The kernel takes VXLAN packets from anyone who can reach the port; a filter chain lets in only
// the current nodes' addresses, so a host outside the cluster cannot inject pod traffic.
import { bridgeTool, ip, ipJson, iptables, setOnlyAddress } from './ip.ts';

export const VXLAN_DEVICE = 'kctl-vxlan';
export const VXLAN_FILTER_CHAIN = 'KCTL-VXLAN-IN';
/** Outer IPv4 (20) + UDP (8) + VXLAN (8) + inner Ethernet (14) headers. */
export const VXLAN_OVERHEAD = 50;
/** Locally administered, unicast; the other 4 bytes are the VTEP's IPv4 address. */
const MAC_PREFIX = '0e:6b';

export interface VxlanDevice {
  vni: number;
  port: number;
  /** This node's address (the outer source). */
  localIP: string;
  mtu: number;
  /** This node's VTEP address (its pod CIDR's network address). */
  vtep: string;
}

export interface VxlanPeer {
  /** The node's VTEP address (its pod CIDR's network address). */
  vtep: string;
  /** The node's own address: where its VXLAN packets go. */
  underlayIP: string;
}

/** A VTEP's MAC, from its address. */
export function vtepMac(vtep: string): string {
  const hex = vtep.split('.').map((o) => Number(o).toString(16).padStart(2, '0'));
  return [MAC_PREFIX, ...hex].join(':');
}

interface LinkJson {
  ifname: string;
  mtu: number;
  address?: string;
  linkinfo?: { info_kind?: string; info_data?: { id?: number; local?: string; port?: number } };
}

/** The MTU of the interface that holds `address` (the path a node's VXLAN packets leave by). */
export async function interfaceMtu(address: string): Promise<number> {
  const links = ipJson<{ ifname: string; mtu: number; addr_info?: { local: string }[] }>(
    await ip(['-j', 'addr', 'show']),
  );
  const link = links.find((l) => l.addr_info?.some((a) => a.local === address));
  if (!link) throw new Error(`no interface holds ${address}, the node's address`);
  return link.mtu;
}

/** Creates or corrects the device (made again when its VNI, address or port differ). */
export async function ensureVxlanDevice(d: VxlanDevice): Promise<void> {
  const mac = vtepMac(d.vtep);
  const links = ipJson<LinkJson>(await ip(['-d', '-j', 'link', 'show']).catch(() => '[]'));
  const have = links.find((l) => l.ifname === VXLAN_DEVICE);
  const info = have?.linkinfo?.info_data;
  if (
    !have ||
    have.linkinfo?.info_kind !== 'vxlan' ||
    info?.id !== d.vni ||
    info.local !== d.localIP ||
    info.port !== d.port
  ) {
    if (have) await ip(['link', 'del', VXLAN_DEVICE]);
    const vxlan = ['id', String(d.vni), 'local', d.localIP, 'dstport', String(d.port), 'nolearning'];
    await ip(['link', 'add', VXLAN_DEVICE, 'address', mac, 'mtu', String(d.mtu), 'type', 'vxlan', ...vxlan]);
  } else {
    if (have.address !== mac) await ip(['link', 'set', VXLAN_DEVICE, 'address', mac]);
    if (have.mtu !== d.mtu) await ip(['link', 'set', VXLAN_DEVICE, 'mtu', String(d.mtu)]);
  }
  await setOnlyAddress(VXLAN_DEVICE, d.vtep);
  await ip(['link', 'set', VXLAN_DEVICE, 'up']);
}

/** Sets the neighbour and FDB entries to exactly `peers`; returns the errors of entries it could not set. */
export async function syncVxlanPeers(peers: VxlanPeer[]): Promise<string[]> {
  const errors: string[] = [];
  const attempt = (p: Promise<unknown>) =>
    p.catch((err: unknown) => errors.push(err instanceof Error ? err.message : String(err)));
  const wantFdb = new Map(peers.map((p) => [vtepMac(p.vtep), p.underlayIP]));
  const wantNeigh = new Map(peers.map((p) => [p.vtep, vtepMac(p.vtep)]));
  const fdb = ipJson<{ mac: string; dst?: string }>(await bridgeTool(['-j', 'fdb', 'show', 'dev', VXLAN_DEVICE]));
  for (const [mac, dst] of wantFdb)
    if (!fdb.some((e) => e.mac === mac && e.dst === dst))
      await attempt(bridgeTool(['fdb', 'replace', mac, 'dev', VXLAN_DEVICE, 'dst', dst, 'self', 'permanent']));
  for (const e of fdb)
    if (e.mac.startsWith(MAC_PREFIX + ':') && e.dst && wantFdb.get(e.mac) !== e.dst)
      await attempt(bridgeTool(['fdb', 'del', e.mac, 'dev', VXLAN_DEVICE, 'dst', e.dst, 'self']));
  const neigh = ipJson<{ dst: string; lladdr?: string; state?: string[] }>(
    await ip(['-j', '-4', 'neigh', 'show', 'dev', VXLAN_DEVICE]),
  );
  for (const [dst, mac] of wantNeigh)
    if (!neigh.some((n) => n.dst === dst && n.lladdr === mac && n.state?.includes('PERMANENT')))
      await attempt(ip(['neigh', 'replace', dst, 'lladdr', mac, 'dev', VXLAN_DEVICE, 'nud', 'permanent']));
  for (const n of neigh) if (!wantNeigh.has(n.dst)) await attempt(ip(['neigh', 'del', n.dst, 'dev', VXLAN_DEVICE]));
  return errors;
}

const DROP_COMMENT = 'kctl: VXLAN only from nodes';
const filter = (args: string[]) => iptables('filter', args);

/** The sources the chain lets in now, or undefined when it is missing or not kctl's shape. */
async function allowedSources(): Promise<string[] | undefined> {
  const listed = await filter(['-S', VXLAN_FILTER_CHAIN]);
  if (!listed.ok) return undefined;
  const rules = listed.stdout.split('\n').filter((l) => l.startsWith(`-A ${VXLAN_FILTER_CHAIN} `));
  if (!rules.at(-1)?.endsWith('-j DROP')) return undefined;
  const sources = rules.slice(0, -1).map((l) => /^-A \S+ -s (\S+)\/32 -j RETURN$/.exec(l)?.[1]);
  return sources.every((s) => s !== undefined) ? (sources as string[]) : undefined;
}

/** Lets VXLAN packets to `port` in from `sources` only (the other nodes' addresses). */
export async function allowVxlanFrom(port: number, sources: string[]): Promise<void> {
  const want = [...new Set(sources)].sort();
  const have = await allowedSources();
  if (!have || have.join(' ') !== want.join(' ')) {
    await filter(['-N', VXLAN_FILTER_CHAIN]); // exists already on a restart
    await filter(['-F', VXLAN_FILTER_CHAIN]);
    const rules = [
      ...want.map((s) => ['-s', `${s}/32`, '-j', 'RETURN']),
      ['-m', 'comment', '--comment', DROP_COMMENT, '-j', 'DROP'],
    ];
    for (const r of rules) {
      const added = await filter(['-A', VXLAN_FILTER_CHAIN, ...r]);
      if (!added.ok) throw new Error(`iptables -A ${VXLAN_FILTER_CHAIN} ${r.join(' ')}: ${added.stderr}`);
    }
  }
  await unhookOtherPorts(port);
  const hook = ['INPUT', '-p', 'udp', '-m', 'udp', '--dport', String(port), '-j', VXLAN_FILTER_CHAIN];
  if (!(await filter(['-C', ...hook])).ok) {
    const r = await filter(['-I', ...hook]);
    if (!r.ok) throw new Error(`iptables -I ${hook.join(' ')}: ${r.stderr}`);
  }
}

/** Removes INPUT's jumps to the chain, except the one for `keepPort`. */
async function unhookOtherPorts(keepPort?: number): Promise<void> {
  const input = await filter(['-S', 'INPUT']);
  for (const line of input.stdout.split('\n')) {
    if (!line.endsWith(`-j ${VXLAN_FILTER_CHAIN}`)) continue;
    if (keepPort !== undefined && line.includes(`--dport ${keepPort} `)) continue;
    await filter(['-D', ...line.split(' ').slice(1)]);
  }
}

/** Removes the device (with its routes and entries) and the filter chain; nothing there is fine. */
export async function removeVxlan(): Promise<void> {
  await ip(['link', 'del', VXLAN_DEVICE]).catch(() => undefined);
  await unhookOtherPorts();
  await filter(['-F', VXLAN_FILTER_CHAIN]);
  await filter(['-X', VXLAN_FILTER_CHAIN]);
}
