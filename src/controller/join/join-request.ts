// What a joining controller and the join endpoint exchange (join.ts asks, join-server.ts answers):
// the path, what the joiner says about itself, the files every controller shares, and the checks
// that refuse a joiner whose config would split the cluster.
import { datastoreIdentity } from '../../etcd/kine.ts';
import type { ClusterConfig } from '../config/config.ts';

export const JOIN_PATH = '/v1/controller/join';

/** What a joining controller says about itself. */
export interface JoinRequest {
  /** Its etcd member name. */
  name: string;
  /** Its etcd peer URL (etcd storage). */
  peerUrl: string;
  storage: 'etcd' | 'kine';
  /** With kine: the database its data source names, without credentials (etcd/kine.ts datastoreIdentity); absent for SQLite. */
  datastore?: string;
  network: { podCIDR: string; serviceCIDR: string; clusterDomain: string; mode?: string; relay?: string };
}

export interface JoinResponse {
  /** SHARED_PKI_FILES, base64. */
  files: Record<string, string>;
  etcd?: { initialCluster: string; memberId: string };
}

/** The joiner's config against the cluster's: differences that would split the cluster. */
export function configMismatch(cfg: ClusterConfig, req: JoinRequest): string | null {
  if (req.storage !== cfg.spec.storage.type)
    return `the cluster stores its state in ${cfg.spec.storage.type}, the joining controller is configured for ${req.storage}; set spec.storage.type: ${cfg.spec.storage.type}`;
  if (cfg.spec.storage.type === 'kine') {
    const ours = datastoreIdentity(cfg.spec.storage.kine.dataSource);
    if (!ours)
      return "the cluster keeps its state in kine on a SQLite file in one controller's data dir, which no other controller can share; for more than one controller use etcd, or kine on PostgreSQL or MySQL";
    if (req.datastore !== ours)
      return `the cluster's datastore is ${ours} but the joining controller's is ${req.datastore ?? 'a local SQLite file'}; set spec.storage.kine.dataSource to ${ours} (with this controller's credentials)`;
  }
  const n = cfg.spec.network;
  for (const k of ['podCIDR', 'serviceCIDR', 'clusterDomain'] as const)
    if (req.network[k] !== n[k])
      return `spec.network.${k} is ${n[k]} in the cluster but ${req.network[k]} on the joining controller; use the cluster's value`;
  // Each controller publishes its mode at start: two that disagree would switch the nodes back and forth.
  if (req.network.mode && n.mode && req.network.mode !== n.mode)
    return `spec.network.mode is ${n.mode} in the cluster but ${req.network.mode} on the joining controller; use the cluster's value`;
  // Likewise the relay (a joiner from before relays sends none); a controller that does not relay drops what nodes hand it.
  if (req.network.relay && req.network.relay !== n.relay)
    return `spec.network.relay is ${n.relay} in the cluster but ${req.network.relay} on the joining controller; use the cluster's value`;
  return null;
}
