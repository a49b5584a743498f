// Nodes read the controllers' leases in kctl-controllers, a namespace that holds nothing else. A
// node of an older kctl reads them in kube-system, where every other lease of the control plane
// lives too: kube-system's lease reader role for nodes is kept while a Node says it runs a kctl
// older than NODE_LEASES_SINCE (or says nothing), and removed once none does. A node can lie only
// to keep it (the status quo); it cannot make an older node lose it, since every Node must say so.
import { messageOf } from '../../base/errors.ts';
import type { KubeClient } from '../../kube/client.ts';
import { LEASE_NAMESPACE, NODE_LEASES_SINCE } from '../../kube/controller-leases.ts';
import { objectPath } from '../../kube/paths.ts';
import { leaseReaderRbac } from './bootstrap.ts';
import { nodesBefore, type NodeWatchComponent } from '../nodes/nodes.ts';
import { NodeReconciler } from '../nodes/node-reconciler.ts';

/** The Nodes that read the controllers' leases in kube-system: an older kctl's, or one that names no release. */
export function nodesOnKubeSystemLeases(versions: Map<string, string | undefined>): string[] {
  return nodesBefore(versions, NODE_LEASES_SINCE);
}

const RECHECK_MS = 60_000;

export class NodeLeaseAccessComponent extends NodeReconciler {
  readonly name = 'node-lease-access';
  /** What the API holds as far as this controller knows (undefined: look again). */
  private granted: boolean | undefined;
  private said: boolean | undefined;

  constructor(
    private readonly kube: KubeClient,
    nodes: NodeWatchComponent,
  ) {
    // Rechecked now and then: a role an operator deleted or re-created by hand is set right again.
    super(nodes, RECHECK_MS);
  }

  protected forget(): void {
    this.granted = undefined;
  }

  protected async reconcile(): Promise<void> {
    const older = nodesOnKubeSystemLeases(this.nodes.kctlVersions());
    const grant = older.length > 0;
    if (grant === this.granted) return;
    const docs = leaseReaderRbac(LEASE_NAMESPACE);
    try {
      if (grant) for (const d of docs) await this.kube.apply(d, { fieldManager: 'kctl', force: true });
      else
        for (const d of docs) {
          await this.kube.remove(objectPath(d));
        }
      // Said when the decision changes (not at every recheck), and at the start only when nodes still need the right.
      if (grant !== this.said && (this.said !== undefined || grant))
        this.log.info(
          { nodes: older.slice(0, 20), count: older.length },
          grant
            ? `nodes of a kctl before ${NODE_LEASES_SINCE} read the controllers' leases in ${LEASE_NAMESPACE}: their read right there is kept`
            : `every node runs kctl ${NODE_LEASES_SINCE} or later: nodes no longer read leases in ${LEASE_NAMESPACE}`,
        );
      this.granted = this.said = grant;
      this.lastError = undefined;
    } catch (err) {
      this.lastError = `cannot set the nodes' read right on leases in ${LEASE_NAMESPACE}: ${messageOf(err)}`;
    }
  }
}
