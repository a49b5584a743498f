// One watch of the cluster's Nodes for the whole controller: the konnectivity server judges
// agent claims against it and the serving-certificate approver judges CSRs against it, with the
// same rule (base/ownership.ts ownershipProblem). Started after kube-apiserver; until its
// first list it is not `synced` and both wait.
//
// It also remembers who reported an address first: when two Nodes report the same address or
// name, the first keeps it while it keeps reporting it, and the conflict is shown (kctl status,
// a Warning event on both Nodes). Order is what this watch saw; on its first list (a controller
// start) the older Node counts as the first reporter.
import type { Component, ComponentContext, ComponentStatus } from '../../base/component.ts';
import type { Logger } from '../../base/log.ts';
import {
  canonicalIdentifier,
  judgePodRanges,
  ownedBy,
  type NodeDirectory,
  type NodeRecord,
  type PodRangeVerdict,
  type RefusedPodRange,
  type ReservedSpace,
} from '../../base/ownership.ts';
import type { KubeClient } from '../../kube/client.ts';
import { Informer, type ListWatchOptions } from '../../kube/informer.ts';
import { warningEvent } from '../../kube/events.ts';
import { isNodeReady } from '../../kube/nodes.ts';

interface KubeNode {
  metadata: { name: string; uid?: string; creationTimestamp?: string };
  spec?: { podCIDR?: string; podCIDRs?: string[] };
  status?: {
    addresses?: NodeRecord['addresses'];
    daemonEndpoints?: { kubeletEndpoint?: { Port?: number } };
    conditions?: { type: string; status: string }[];
  };
}

const nodeRecord = (n: KubeNode): NodeRecord => ({
  name: n.metadata.name,
  addresses: n.status?.addresses ?? [],
  podCIDRs: n.spec?.podCIDRs ?? (n.spec?.podCIDR ? [n.spec.podCIDR] : []),
  kubeletPort: n.status?.daemonEndpoints?.kubeletEndpoint?.Port || undefined,
});

export interface NodeCounts {
  ready: number;
  total: number;
}

/** Listener argument: the Node that changed, or undefined after a (re)list. */
export type NodeChangeListener = (node?: string) => void;

/** Two or more Nodes report one address or name; `owner` keeps it. */
export interface AddressConflict {
  value: string;
  owner: string;
  others: string[];
}

/** Oldest first, then by name: the order a first list is read in. */
const byAge = (a: KubeNode, b: KubeNode): number =>
  (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? '') || a.metadata.name.localeCompare(b.metadata.name);

export class NodeWatchComponent implements Component, NodeDirectory {
  readonly name = 'node-watch';
  private log: Logger | undefined;
  private readonly informer: Informer<KubeNode>;
  private readonly listeners = new Set<NodeChangeListener>();
  /** node -> (value it reports -> when this watch first saw it report it). */
  private readonly firstSeen = new Map<string, Map<string, number>>();
  private seq = 0;
  /** value -> Nodes that report it, the keeper first; rebuilt on the first question after a change. */
  private index: Map<string, string[]> | undefined;
  /** Each Node's pod ranges as the one rule judges them; rebuilt on the first question after a change. */
  private ranges: PodRangeVerdict | undefined;
  /** Refused ranges already announced (node + range -> reason). */
  private readonly announcedRanges = new Map<string, string>();
  /** Conflicts already announced with events (value -> "owner,others"). */
  private readonly announced = new Map<string, string>();
  private lastError: string | undefined;

  constructor(
    private readonly kube: KubeClient,
    readonly reserved: ReservedSpace | undefined = undefined,
    watch: ListWatchOptions = {},
  ) {
    this.informer = new Informer<KubeNode>(
      kube,
      '/api/v1/nodes',
      watch,
      (type, node) => {
        this.index = undefined;
        this.ranges = undefined;
        if (type === 'LIST') {
          this.lastError = undefined;
          for (const name of this.firstSeen.keys()) if (!this.informer.store.has(name)) this.firstSeen.delete(name);
          for (const n of [...this.informer.store.values()].sort(byAge)) this.noteReports(n);
        } else if (type === 'DELETED') this.firstSeen.delete(node!.metadata.name);
        else this.noteReports(node!);
        this.announceConflicts();
        this.announceRefusedRanges();
        for (const l of this.listeners) l(type === 'LIST' ? undefined : node?.metadata.name);
      },
      (err) => {
        this.lastError = err.message;
      },
    );
  }

  /** Keeps the first-seen mark of every value the Node still reports; a value it dropped loses its place. */
  private noteReports(n: KubeNode): void {
    const before = this.firstSeen.get(n.metadata.name) ?? new Map<string, number>();
    const now = new Map<string, number>();
    for (const v of new Set(ownedBy(nodeRecord(n)))) now.set(v, before.get(v) ?? this.seq++);
    this.firstSeen.set(n.metadata.name, now);
  }

  get synced(): boolean {
    return this.informer.hasSynced;
  }

  /** How many Nodes the cluster has. */
  get size(): number {
    return this.informer.store.size;
  }

  /** How many Nodes are Ready, of how many (kctl status, kctl tenant list). */
  counts(): NodeCounts {
    const all = [...this.informer.store.values()];
    const ready = all.filter(isNodeReady).length;
    return { ready, total: all.length };
  }

  /** The names of every Node. */
  names(): string[] {
    return [...this.informer.store.keys()];
  }

  /** The Node as the ownership rule lets others believe it: its pod ranges only as judgePodRanges leaves them. */
  get(name: string): NodeRecord | undefined {
    const n = this.informer.get(name);
    return n && { ...nodeRecord(n), podCIDRs: this.podRanges().ranges.get(name) ?? [] };
  }

  private podRanges(): PodRangeVerdict {
    this.ranges ??= judgePodRanges([...this.informer.store.values()].map(nodeRecord), this.reserved);
    return this.ranges;
  }

  /** Every pod range a Node holds that no traffic is routed to, with why (kctl status). */
  refusedPodRanges(): RefusedPodRange[] {
    return [...this.podRanges().refused].sort((a, b) => a.node.localeCompare(b.node) || a.range.localeCompare(b.range));
  }

  owners(nameOrIp: string): string[] {
    return this.ownerIndex().get(canonicalIdentifier(nameOrIp)) ?? [];
  }

  private ownerIndex(): Map<string, string[]> {
    if (this.index) return this.index;
    const marks = new Map<string, { node: string; at: number }[]>();
    for (const [node, values] of this.firstSeen) {
      for (const [v, at] of values) marks.set(v, [...(marks.get(v) ?? []), { node, at }]);
    }
    const index = new Map<string, string[]>();
    for (const [v, list] of marks) {
      // A Node's own name is always its own, whoever else reports it.
      const rank = (m: { node: string; at: number }) => (canonicalIdentifier(m.node) === v ? -1 : m.at);
      index.set(
        v,
        list.sort((a, b) => rank(a) - rank(b)).map((m) => m.node),
      );
    }
    this.index = index;
    return index;
  }

  /** Every address or name more than one Node reports, with the Node that keeps it. */
  conflicts(): AddressConflict[] {
    const out: AddressConflict[] = [];
    for (const [value, nodes] of this.ownerIndex()) {
      if (nodes.length > 1) out.push({ value, owner: nodes[0]!, others: nodes.slice(1) });
    }
    return out.sort((a, b) => a.value.localeCompare(b.value));
  }

  /** One warn line and one Warning event on each Node involved, once per conflict as it appears. */
  private announceConflicts(): void {
    const current = new Map(this.conflicts().map((c) => [c.value, c] as const));
    for (const v of this.announced.keys()) if (!current.has(v)) this.announced.delete(v);
    for (const c of current.values()) {
      const key = [c.owner, ...c.others].join(',');
      if (this.announced.get(c.value) === key) continue;
      this.announced.set(c.value, key);
      const message = `${c.value} is reported by nodes ${key}; node ${c.owner} reported it first and keeps it (tunnel claims, serving certificates)`;
      this.log?.warn({ address: c.value, owner: c.owner, others: c.others }, `address conflict: ${message}`);
      for (const node of [c.owner, ...c.others]) void this.nodeEvent(node, 'AddressConflict', message);
    }
  }

  /** One warn line and one Warning event on the Node, once per refused range as it appears. */
  private announceRefusedRanges(): void {
    const current = new Map<string, RefusedPodRange>(this.refusedPodRanges().map((r) => [`${r.node} ${r.range}`, r]));
    for (const k of this.announcedRanges.keys()) if (!current.has(k)) this.announcedRanges.delete(k);
    for (const [k, r] of current) {
      if (this.announcedRanges.get(k) === r.reason) continue;
      this.announcedRanges.set(k, r.reason);
      const message = `pod range ${r.range} of node ${r.node} is refused: ${r.reason}; the tunnel and the pod network route nothing to it`;
      this.log?.warn({ node: r.node, podCIDR: r.range }, message);
      void this.nodeEvent(r.node, 'PodRangeRefused', message);
    }
  }

  private async nodeEvent(node: string, reason: string, message: string): Promise<void> {
    const uid = this.informer.get(node)?.metadata.uid;
    await warningEvent(this.kube, { kind: 'Node', name: node, uid }, reason, message, 'kctl-controller').catch(
      (err: Error) => (this.lastError = `cannot record a ${reason} event on node ${node}: ${err.message}`),
    );
  }

  onChange(listener: NodeChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    this.informer.start();
  }

  async stop(): Promise<void> {
    await this.informer.stop();
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.lastError };
  }
}
