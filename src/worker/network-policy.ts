// NetworkPolicy on this node: the controllers resolve every policy down to what this node's own
// pods may send and receive (kube/network-policy.ts) and publish it in one ConfigMap only this
// node may read; this component watches it and keeps one nftables table, kctl_netpol, in step.
//
// The table hooks forward, so it sees pod traffic between nodes (routes, VXLAN, WireGuard) and,
// with br_netfilter, between pods on this node's bridge; traffic from the host itself (kubelet's
// probes) never passes forward. Replies of allowed connections pass (conntrack); Service
// addresses are already translated to the chosen pod there (kube-proxy's DNAT runs in prerouting).
// A pod isolated for egress jumps to its egress chain, which returns when allowed; then a pod
// isolated for ingress jumps to its ingress chain, which accepts when allowed; both end in drop.
// Every change replaces the whole table in one nft transaction. No object (policy off, or a
// cluster from before policies): no table. stop() leaves the table (pods keep their policies
// across a restart); cleanupNetworkPolicy() removes it.
import {
  NETPOL_COLLECTION,
  netpolConfigMapName,
  parseNodePolicy,
  type NodePolicy,
  type PolicyAllow,
  type PolicyPort,
} from '../kube/network-policy.ts';
import type { KubeClient } from '../kube/client.ts';
import { Informer, NODE_WATCH, type ListWatchOptions } from '../kube/informer.ts';
import { removeInetTable, replaceInetTable } from '../host/nftables.ts';
import type { Logger } from '../base/log.ts';
import type { Component, ComponentContext, ComponentStatus } from '../base/component.ts';
import { reasonOf } from '../base/errors.ts';
import { ipv4FromNumber, ipv4Range } from '../base/addresses.ts';

export const NETPOL_TABLE = 'kctl_netpol';

interface KubeConfigMap {
  metadata: { name: string; namespace?: string };
  data?: Record<string, string>;
}

// ---- rendering (validated again here: the object came over the network) ----

/** The CIDRs as nft set elements: network addresses, and none inside another (nft refuses overlapping intervals). */
export function cidrSet(cidrs: string[]): string[] {
  const ranges = cidrs.map(ipv4Range).filter((r) => r !== undefined);
  // IPv4 addresses fit a double exactly: the differences compare as numbers.
  ranges.sort((a, b) => Number(a.first - b.first) || Number(b.last - a.last));
  const out: string[] = [];
  let end = -1n;
  for (const r of ranges) {
    if (r.last <= end) continue;
    end = r.last;
    out.push(`${ipv4FromNumber(r.first)}/${r.bits}`);
  }
  return out;
}

const set = (items: string[]): string => (items.length === 1 ? items[0]! : `{ ${items.join(', ')} }`);
const validPort = (n: number | undefined): n is number => Number.isInteger(n) && n! >= 1 && n! <= 65_535;

/** The l4 part of each rule an allow makes: one per protocol, '' for any protocol. */
function portMatches(ports: PolicyPort[] | undefined): string[] {
  if (!ports) return [''];
  const out: string[] = [];
  for (const proto of ['TCP', 'UDP', 'SCTP'] as const) {
    const mine = ports.filter((p) => p.protocol === proto);
    if (mine.length === 0) continue;
    const l4 = `meta l4proto ${proto.toLowerCase()}`;
    if (mine.some((p) => p.port === undefined)) {
      out.push(l4);
      continue;
    }
    const items = mine
      .filter((p) => validPort(p.port))
      .map((p) => (validPort(p.endPort) && p.endPort > p.port! ? `${p.port}-${p.endPort}` : String(p.port)));
    if (items.length) out.push(`${l4} th dport ${set([...new Set(items)])}`);
  }
  return out;
}

/** The address part of each rule an allow makes, '' for any address; none when every peer was unusable. */
function peerMatches(allow: PolicyAllow, field: 'saddr' | 'daddr'): string[] {
  if (!allow.peers) return [''];
  const out: string[] = [];
  const plain = cidrSet(allow.peers.filter((p) => !p.except?.length).map((p) => p.cidr));
  if (plain.length) out.push(`ip ${field} ${set(plain)}`);
  for (const p of allow.peers.filter((q) => q.except?.length)) {
    const base = cidrSet([p.cidr]);
    if (base.length === 0) continue;
    const except = cidrSet(p.except ?? []);
    out.push(`ip ${field} ${base[0]}${except.length ? ` ip ${field} != ${set(except)}` : ''}`);
  }
  return out;
}

function chain(name: string, allows: PolicyAllow[], field: 'saddr' | 'daddr', verdict: 'accept' | 'return'): string {
  const rules: string[] = [];
  for (const a of allows) {
    for (const peer of peerMatches(a, field)) {
      for (const port of portMatches(a.ports)) rules.push([peer, port, verdict].filter(Boolean).join(' '));
    }
  }
  return `  chain ${name} {\n${[...rules, 'drop'].map((r) => `    ${r}\n`).join('')}  }\n`;
}

/** The table's body for `policy`; pods with an unusable address are left out. */
export function renderNodePolicy(policy: NodePolicy): string {
  const chains: string[] = [];
  const egress: string[] = [];
  const ingress: string[] = [];
  policy.pods.forEach((p, i) => {
    const r = ipv4Range(p.ip);
    if (r?.bits !== 32) return;
    const ip = ipv4FromNumber(r.first);
    if (p.egress) {
      chains.push(chain(`egress-${i}`, p.egress, 'daddr', 'return'));
      egress.push(`${ip} : jump egress-${i}`);
    }
    if (p.ingress) {
      chains.push(chain(`ingress-${i}`, p.ingress, 'saddr', 'accept'));
      ingress.push(`${ip} : jump ingress-${i}`);
    }
  });
  const base = [
    'type filter hook forward priority filter; policy accept;',
    'ct state established,related accept',
    ...(egress.length ? [`ip saddr vmap { ${egress.join(', ')} }`] : []),
    ...(ingress.length ? [`ip daddr vmap { ${ingress.join(', ')} }`] : []),
  ];
  return `  chain forward {\n${base.map((r) => `    ${r}\n`).join('')}  }\n${chains.join('')}`;
}

// ---- the component ----

export interface NetworkPolicyOptions {
  nodeName: string;
  /** The worker's API client, with the kubelet's credentials. */
  kube: KubeClient;
  /** How often the table is written again without a change (repairs a flushed ruleset). Default 30 s. */
  resyncIntervalMs?: number;
  watch?: ListWatchOptions;
}

export interface NetworkPolicyStatus {
  /** The table is in place (the cluster publishes policy for this node). */
  enforced: boolean;
  /** Pods of this node some policy isolates. */
  isolatedPods: number;
  lastError?: string;
}

export class NetworkPolicyComponent implements Component {
  readonly name = 'network-policy';
  private log!: Logger;
  private informer?: Informer<KubeConfigMap>;
  private timer?: NodeJS.Timeout;
  private applied?: string | null;
  private isolated = 0;
  private lastError?: string;
  private syncing: Promise<void> = Promise.resolve();

  constructor(private readonly opts: NetworkPolicyOptions) {}

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    const name = netpolConfigMapName(this.opts.nodeName);
    this.informer ??= new Informer<KubeConfigMap>(
      this.opts.kube,
      NETPOL_COLLECTION,
      { ...NODE_WATCH, ...this.opts.watch, fieldSelector: `metadata.name=${name}` },
      () => this.sync(),
      (err) => (this.lastError = `cannot watch ${name}: ${reasonOf(err)}`),
    );
    this.informer.start();
    this.timer = setInterval(() => {
      if (this.applied) this.applied = undefined;
      void this.sync();
    }, this.opts.resyncIntervalMs ?? 30_000);
    this.timer.unref();
  }

  /** One sync at a time, each from the latest object. */
  private sync(): Promise<void> {
    this.syncing = this.syncing.then(() => this.apply());
    return this.syncing;
  }

  private async apply(): Promise<void> {
    const cm = this.informer?.store.values().next().value;
    try {
      if (!cm) {
        // At the first sync a table left by an earlier run goes too; a host without nft has none.
        if (this.applied !== null)
          await removeInetTable(NETPOL_TABLE).catch((err: unknown) => (this.applied ? Promise.reject(err) : undefined));
        if (this.applied) this.log.info('no network policy published for this node; table removed');
        this.applied = null;
        this.isolated = 0;
      } else {
        const policy = parseNodePolicy(cm.data);
        const body = renderNodePolicy(policy);
        if (body !== this.applied) {
          await replaceInetTable(NETPOL_TABLE, body);
          if (this.applied !== undefined || this.isolated !== policy.pods.length)
            this.log.info({ isolatedPods: policy.pods.length }, 'network policy applied');
          this.applied = body;
          this.isolated = policy.pods.length;
        }
      }
      this.lastError = undefined;
    } catch (err) {
      const reason = reasonOf(err);
      if (reason !== this.lastError) this.log.warn(`network policy not applied (the previous rules stay): ${reason}`);
      this.lastError = reason;
    }
  }

  snapshot(): NetworkPolicyStatus {
    return {
      enforced: !!this.applied,
      isolatedPods: this.isolated,
      ...(this.lastError ? { lastError: this.lastError } : {}),
    };
  }

  status(): Partial<ComponentStatus> {
    return this.lastError ? { lastError: this.lastError } : {};
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.informer?.stop();
    await this.syncing;
  }
}

/** For `kctl reset`: removes the policy table. */
export function cleanupNetworkPolicy(): Promise<void> {
  return removeInetTable(NETPOL_TABLE).catch(() => undefined);
}
