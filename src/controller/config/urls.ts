// Where this controller's endpoints are, as its config says: the API, the join endpoint and the
// konnectivity agent port. Leases, tokens and kubeconfigs all name them the same way.
import { httpsUrl, joinHostPort, type FrontDoorEndpoint } from '../../base/addresses.ts';
import type { ClusterConfig } from './config.ts';
import { frontDoorNames } from './front-door.ts';

export function apiServerUrl(cfg: ClusterConfig): string {
  return httpsUrl(cfg.spec.api.address, cfg.spec.api.port);
}

/** The URL joining controllers use to reach this controller's join endpoint. */
export function joinServerUrl(cfg: ClusterConfig): string {
  return httpsUrl(cfg.spec.api.address, cfg.spec.api.joinPort);
}

export function konnectivityAddress(cfg: ClusterConfig): string {
  return joinHostPort(cfg.spec.api.address, cfg.spec.konnectivity.agentPort);
}

/**
 * Where nodes reach this controller through its host's front door, and the names to send there
 * (none without a front door, or for an api-only cluster, which has no nodes). The door's own
 * address when it listens on one, else the API address.
 */
export function frontDoorEndpoint(cfg: ClusterConfig): FrontDoorEndpoint | undefined {
  const names = frontDoorNames(cfg);
  if (!names?.konnectivity || !names.join || !names.nodeApi) return undefined;
  const f = cfg.spec.frontDoor;
  const host = f.address && f.address !== '0.0.0.0' && f.address !== '::' ? f.address : cfg.spec.api.address;
  const { api, konnectivity, join, nodeApi } = names;
  const nodeLocal = joinHostPort(f.nodeLocalAddress, cfg.spec.api.port);
  return { address: joinHostPort(host, f.port), api, konnectivity, join, nodeApi, nodeLocal };
}

/** Whether the front door is this cluster's only way in (spec.frontDoor.only): its servers listen on loopback alone. */
export const doorOnly = (cfg: ClusterConfig): boolean => cfg.spec.frontDoor.enabled && cfg.spec.frontDoor.only;

/** Where this host's own programs reach kube-apiserver (the control plane's kubeconfigs, the door): loopback when only the door is open. */
export const localApiHost = (cfg: ClusterConfig): string => (doorOnly(cfg) ? '127.0.0.1' : cfg.spec.api.address);

/** The API URL a kubeconfig for someone elsewhere names: the door's by the cluster's name when only the door is open. */
export function userApiUrl(cfg: ClusterConfig): string {
  const names = frontDoorNames(cfg);
  return doorOnly(cfg) && names ? httpsUrl(names.api, cfg.spec.frontDoor.port) : apiServerUrl(cfg);
}
