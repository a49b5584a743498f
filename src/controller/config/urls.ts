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
