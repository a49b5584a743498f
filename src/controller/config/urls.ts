// Where this controller's endpoints are, as its config says: the API, the join endpoint and the
// konnectivity agent port. Leases, tokens and kubeconfigs all name them the same way.
import { httpsUrl, joinHostPort } from '../../base/addresses.ts';
import type { ClusterConfig } from './config.ts';

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
