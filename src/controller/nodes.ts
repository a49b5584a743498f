// One watch of the cluster's Nodes for the whole controller: the konnectivity server judges
// agent claims against it and the serving-certificate approver judges CSRs against it, with the
// same rule (konnectivity/claims.ts). Started after kube-apiserver; until its first list it is
// not `synced` and both wait.
import type { Component, ComponentStatus } from '../base/component.ts';
import type { NodeDirectory, NodeRecord } from '../konnectivity/claims.ts';
import { canonicalIdentifier, ownedBy } from '../konnectivity/claims.ts';
import type { KubeClient } from '../kube/client.ts';
import { Informer, type ListWatchOptions } from '../kube/informer.ts';

interface KubeNode {
  metadata: { name: string };
  spec?: { podCIDR?: string; podCIDRs?: string[] };
  status?: { addresses?: NodeRecord['addresses'] };
}

const nodeRecord = (n: KubeNode): NodeRecord => ({
  name: n.metadata.name,
  addresses: n.status?.addresses ?? [],
  podCIDRs: n.spec?.podCIDRs ?? (n.spec?.podCIDR ? [n.spec.podCIDR] : []),
});

/** Listener argument: the Node that changed, or undefined after a (re)list. */
export type NodeChangeListener = (node?: string) => void;

export class NodeWatchComponent implements Component, NodeDirectory {
  readonly name = 'node-watch';
  private readonly informer: Informer<KubeNode>;
  private readonly listeners = new Set<NodeChangeListener>();
  /** name or address -> Nodes that report it; rebuilt on the first question after a change. */
  private index: Map<string, string[]> | undefined;
  private lastError: string | undefined;

  constructor(kube: KubeClient, watch: ListWatchOptions = {}) {
    this.informer = new Informer<KubeNode>(
      kube,
      '/api/v1/nodes',
      watch,
      (type, node) => {
        this.index = undefined;
        if (type === 'LIST') this.lastError = undefined;
        for (const l of this.listeners) l(type === 'LIST' ? undefined : node?.metadata.name);
      },
      (err) => {
        this.lastError = err.message;
      },
    );
  }

  get synced(): boolean {
    return this.informer.hasSynced;
  }

  /** How many Nodes the cluster has. */
  get size(): number {
    return this.informer.store.size;
  }

  get(name: string): NodeRecord | undefined {
    const n = this.informer.get(name);
    return n && nodeRecord(n);
  }

  owners(nameOrIp: string): string[] {
    if (!this.index) {
      const index = new Map<string, string[]>();
      for (const n of this.informer.store.values()) {
        for (const v of new Set(ownedBy(nodeRecord(n)))) {
          index.set(v, [...(index.get(v) ?? []), n.metadata.name]);
        }
      }
      this.index = index;
    }
    return this.index.get(canonicalIdentifier(nameOrIp)) ?? [];
  }

  onChange(listener: NodeChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
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
