// Where a hosted cluster's clients reach it: its Service, and the one address and ports that
// everything its pods write names (kubeconfigs, join tokens, the leases nodes follow). A NodePort
// Service's node ports are also the ports its pods listen on, so what a client outside dials is
// what the cluster says it is. The address is spec.exposure.address when set, else the Service's
// own (a LoadBalancer's, a ClusterIP), else a management node's InternalIP: written by that
// node's kubelet, which runs the control-plane pods and their keys anyway, so it can tell no lie
// it could not act on. Behind the management cluster's front door (door.ts) the Service is a
// ClusterIP the door reaches, and clients name the cluster at the door's address.
import { httpsUrl } from '../base/addresses.ts';
import type { KubeClient } from '../kube/client.ts';
import { resourcePath } from '../kube/paths.ts';
import { clusterDoorNames, type ManagementDoor } from './door-keys.ts';
import {
  behindDoor,
  isFull,
  POD_AGENT_PORT,
  POD_API_PORT,
  service,
  type ClusterPorts,
  type KctlCluster,
} from './objects.ts';

export interface Exposure {
  ports: ClusterPorts;
  /** The address its clients use. */
  address: string;
  /** Other names and addresses its serving certificate carries. */
  sans: string[];
  /** What `kctl cluster list` shows: the API's URL (by its name at the front door, behind one). */
  endpoint: string;
  /** What a kubeconfig names: the URL dialed, and the server name to send (at the door, the API's). */
  server: { url: string; serverName?: string };
  /** The door, for a cluster behind it. */
  door?: ManagementDoor;
}

interface ServiceObject {
  spec?: { clusterIP?: string; ports?: { name?: string; nodePort?: number; targetPort?: number | string }[] };
  status?: { loadBalancer?: { ingress?: { ip?: string }[] } };
}

interface NodeObject {
  status?: { addresses?: { type: string; address: string }[] };
}

/** The ports an applied Service gives: its node ports (NodePort), else the pods' own; undefined while one is not allocated. */
export function portsOf(c: KctlCluster, svc: ServiceObject): ClusterPorts | undefined {
  if ((c.spec.exposure?.type ?? 'NodePort') !== 'NodePort')
    return { api: POD_API_PORT, ...(isFull(c) ? { agent: POD_AGENT_PORT } : {}) };
  const nodePort = (name: string) => svc.spec?.ports?.find((p) => p.name === name)?.nodePort;
  const api = nodePort('api');
  const agent = isFull(c) ? nodePort('konnectivity') : undefined;
  if (!api || (isFull(c) && !agent)) return undefined;
  return { api, ...(agent ? { agent } : {}) };
}

const serviceUrl = (c: KctlCluster) =>
  resourcePath({ apiVersion: 'v1', resource: 'services', namespace: c.metadata.namespace, name: c.metadata.name });

/** Applies the cluster's Service; its exposure, or why it has none yet. */
export async function ensureExposure(
  kube: KubeClient,
  c: KctlCluster,
  apply: { fieldManager: string; force: boolean },
  door: ManagementDoor | undefined,
): Promise<Exposure | { waiting: string }> {
  if (behindDoor(c) && !door)
    return {
      waiting:
        'spec.exposure.type is FrontDoor, but the operator has no front door; run it with --front-door-domain and --front-door-address, or pick another type',
    };
  // The ports the Service has, when it has them: an apply without them would point its targets
  // back at the placeholder until the next apply, and every client in between would be refused.
  const have = await kube.find<ServiceObject>(serviceUrl(c));
  const known = have && portsOf(c, have);
  let svc = (await kube.apply(service(c, known), apply)) as ServiceObject;
  const ports = portsOf(c, svc);
  if (!ports) return { waiting: 'Kubernetes has not given the Service its node ports yet' };
  // A NodePort Service made with its node ports left open: point its targets at what it was given.
  const target = (name: string) => svc.spec?.ports?.find((p) => p.name === name)?.targetPort;
  if (target('api') !== ports.api || (ports.agent && target('konnectivity') !== ports.agent))
    svc = (await kube.apply(service(c, ports), apply)) as ServiceObject;

  const nodes = await kube.list<NodeObject>('/api/v1/nodes');
  const nodeAddresses = nodes.items.flatMap(
    (n) => n.status?.addresses?.filter((a) => a.type === 'InternalIP').map((a) => a.address) ?? [],
  );
  const type = c.spec.exposure?.type ?? 'NodePort';
  const own =
    type === 'LoadBalancer'
      ? svc.status?.loadBalancer?.ingress?.find((i) => i.ip)?.ip
      : type === 'ClusterIP' || type === 'FrontDoor'
        ? svc.spec?.clusterIP
        : nodeAddresses[0];
  const address = c.spec.exposure?.address ?? own;
  if (!address)
    return {
      waiting:
        type === 'LoadBalancer'
          ? 'the LoadBalancer Service has no address yet; set spec.exposure.address to name one'
          : 'the management cluster has no node with an InternalIP',
    };
  const { name, namespace } = c.metadata;
  const sans = [
    ...new Set([
      ...(type === 'NodePort' ? nodeAddresses : []),
      ...(svc.spec?.clusterIP && svc.spec.clusterIP !== 'None' ? [svc.spec.clusterIP] : []),
      `${name}.${namespace}.svc`,
    ]),
  ].filter((s) => s !== address);
  if (behindDoor(c) && door) {
    const name = clusterDoorNames(c, door.domain).api;
    const url = httpsUrl(door.host, door.port);
    return { ports, address, sans, endpoint: httpsUrl(name, door.port), server: { url, serverName: name }, door };
  }
  const url = httpsUrl(address, ports.api);
  return { ports, address, sans, endpoint: url, server: { url } };
}
