// The kubernetes Service's endpoints in a cluster behind a front door (kube-apiserver's own
// reconciler is off there: components/apiserver.ts). Once every node runs a kctl that serves the
// API at the node-local address (spec.frontDoor.nodeLocalAddress, on the loopback device of each
// node: worker/node-local-api.ts), that address is the one endpoint: pods reach the API through
// their own node's balancer and its node API tunnel, with no route to a controller host. While a
// node of an older kctl remains, the endpoints are the live controllers' API addresses, as
// kube-apiserver would write them, so that node's pods keep the API. A node can lie about its
// version only to keep the controllers' addresses (the way before the door) or to cut its own pods off.
import { isIP } from 'node:net';
import type { Component } from '../../base/component.ts';
import { messageOf } from '../../base/errors.ts';
import { splitHostPort, urlHost } from '../../base/addresses.ts';
import type { KubeClient } from '../../kube/client.ts';
import type { KubeManifest } from '../../kube/paths.ts';
import type { LiveController } from '../../kube/controller-leases.ts';
import { nodesBefore, type NodeWatchComponent } from '../nodes/nodes.ts';
import { NodeReconciler } from '../nodes/node-reconciler.ts';
import type { ClusterConfig } from '../config/config.ts';
import { frontDoorEndpoint } from '../config/urls.ts';

/** The first kctl whose workers serve the node-local address. */
export const NODE_LOCAL_API_SINCE = '0.2.0';
const RECHECK_MS = 30_000;

/** The kubernetes Service's Endpoints and EndpointSlice, naming these addresses (one family) and port. */
export function kubernetesEndpoints(addresses: string[], port: number): KubeManifest[] {
  const ports = [{ name: 'https', port, protocol: 'TCP' }];
  const family = addresses.every((a) => isIP(a) === 6) ? 'IPv6' : 'IPv4';
  return [
    {
      apiVersion: 'v1',
      kind: 'Endpoints',
      // kube-apiserver marks it so: no second EndpointSlice is mirrored from it.
      metadata: {
        name: 'kubernetes',
        namespace: 'default',
        labels: { 'endpointslice.kubernetes.io/skip-mirror': 'true' },
      },
      subsets: [{ addresses: addresses.map((ip) => ({ ip })), ports }],
    },
    {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name: 'kubernetes', namespace: 'default', labels: { 'kubernetes.io/service-name': 'kubernetes' } },
      addressType: family,
      endpoints: addresses.map((a) => ({ addresses: [a], conditions: { ready: true } })),
      ports,
    },
  ];
}

/** What the endpoints should be now: the node-local address once no older node remains, else the controllers'. */
export function endpointsPlan(o: {
  nodeLocal: string;
  apiPort: number;
  olderNodes: string[];
  controllers: Pick<LiveController, 'apiServer'>[];
  ownAddress: string;
}): { addresses: string[]; port: number; nodeLocal: boolean } {
  const local = splitHostPort(o.nodeLocal);
  if (!o.olderNodes.length && local) return { addresses: [local.host], port: local.port, nodeLocal: true };
  const hosts = [...new Set([o.ownAddress, ...o.controllers.map((c) => urlHost(c.apiServer))])].filter(
    (h) => isIP(h) === 4,
  );
  return { addresses: hosts.sort(), port: o.apiPort, nodeLocal: false };
}

export class KubernetesEndpointsComponent extends NodeReconciler {
  readonly name = 'kubernetes-endpoints';
  private written: string | undefined;
  private said: boolean | undefined;

  constructor(
    private readonly o: {
      kube: KubeClient;
      nodes: NodeWatchComponent;
      controllers: { liveControllers(): LiveController[] };
      /** host:port of the node-local address (the front door's). */
      nodeLocal: string;
      apiPort: number;
      ownAddress: string;
    },
  ) {
    // Rechecked now and then: the live controllers change, and an edit by hand is set right again.
    super(o.nodes, RECHECK_MS);
  }

  protected forget(): void {
    this.written = undefined;
  }

  protected async reconcile(): Promise<void> {
    const olderNodes = nodesBefore(this.o.nodes.kctlVersions(), NODE_LOCAL_API_SINCE);
    const plan = endpointsPlan({ ...this.o, olderNodes, controllers: this.o.controllers.liveControllers() });
    const key = JSON.stringify(plan);
    if (key === this.written || !plan.addresses.length) return;
    try {
      for (const d of kubernetesEndpoints(plan.addresses, plan.port))
        await this.o.kube.apply(d, { fieldManager: 'kctl', force: true });
      this.written = key;
      this.lastError = undefined;
      if (plan.nodeLocal !== this.said)
        this.log.info(
          { endpoints: plan.addresses.map((a) => `${a}:${plan.port}`), olderNodes: olderNodes.slice(0, 20) },
          plan.nodeLocal
            ? 'pods reach the API at the node-local address on their own node'
            : `nodes of a kctl before ${NODE_LOCAL_API_SINCE} remain: pods reach the API at the controllers' addresses`,
        );
      this.said = plan.nodeLocal;
    } catch (err) {
      this.lastError = `cannot write the kubernetes Service's endpoints: ${messageOf(err)}`;
    }
  }
}

/** The component for a cluster behind a front door (its nodeLocal address); none otherwise. */
export function kubernetesEndpointsComponents(
  cfg: ClusterConfig,
  o: Pick<ConstructorParameters<typeof KubernetesEndpointsComponent>[0], 'kube' | 'nodes' | 'controllers'>,
): Component[] {
  const nodeLocal = frontDoorEndpoint(cfg)?.nodeLocal;
  if (!nodeLocal) return [];
  return [
    new KubernetesEndpointsComponent({ ...o, nodeLocal, apiPort: cfg.spec.api.port, ownAddress: cfg.spec.api.address }),
  ];
}
