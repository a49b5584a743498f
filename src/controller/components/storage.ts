// The controller's datastore: etcd or kine as this config asks, the client view of the local etcd
// member, and what the status report says about it.
import { messageOf } from '../../base/errors.ts';
import { EtcdComponent, etcdClientUrl, type EtcdOptions } from '../../etcd/etcd.ts';
import { datastoreIdentity, KineComponent } from '../../etcd/kine.ts';
import { listMembers, type EtcdClientTls, type EtcdMember } from '../../etcd/members.ts';
import type { PkiPaths } from '../../pki/index.ts';
import { type ClusterConfig } from '../config/config.ts';
import { goRuntimeEnv } from './go-runtime.ts';
import type { ControllerJoinState } from '../join/join.ts';
import type { ControllerPaths } from '../config/paths.ts';

function etcdOptions(
  cfg: ClusterConfig,
  paths: ControllerPaths,
  pki: PkiPaths,
  joined: ControllerJoinState | null,
): EtcdOptions {
  const etcd = cfg.spec.storage.etcd;
  return {
    binDir: paths.binDir,
    runDir: paths.runDir,
    dataDir: paths.etcdDataDir,
    clientPort: etcd.clientPort,
    peerHost: cfg.spec.api.address,
    peerPort: etcd.peerPort,
    name: etcd.memberName,
    joinCluster: joined?.etcd?.initialCluster,
    extraArgs: etcd.extraArgs,
    env: goRuntimeEnv(cfg),
    certs: {
      caCert: pki.etcdCaCert,
      serverCert: pki.etcdServerCert,
      serverKey: pki.etcdServerKey,
      peerCert: pki.etcdPeerCert,
      peerKey: pki.etcdPeerKey,
      clientCert: pki.apiserverEtcdClientCert,
      clientKey: pki.apiserverEtcdClientKey,
    },
  };
}

/** Where the cluster state lives: the etcd members as this controller's etcd sees them, or kine's datastore. */
export type StorageStatus =
  | { type: 'etcd'; members: EtcdMember[]; error?: string }
  | { type: 'kine'; /** The database without credentials; "sqlite" for the local file. */ datastore: string };

/** etcd, or kine (on SQLite in the data dir unless spec.storage.kine.dataSource names a database). */
export function storageComponent(
  cfg: ClusterConfig,
  paths: ControllerPaths,
  pki: PkiPaths,
  joined: ControllerJoinState | null,
): EtcdComponent | KineComponent {
  if (cfg.spec.storage.type === 'etcd') return new EtcdComponent(etcdOptions(cfg, paths, pki, joined));
  return new KineComponent({
    binDir: paths.binDir,
    runDir: paths.runDir,
    dbDir: paths.kineDbDir,
    socket: paths.kineSocket,
    dataSource: cfg.spec.storage.kine.dataSource,
    env: goRuntimeEnv(cfg),
    pool: { maxOpen: cfg.spec.storage.kine.maxOpenConnections, maxIdle: cfg.spec.storage.kine.maxIdleConnections },
  });
}

/** This controller's client view of its local etcd member (kctl etcd, the join endpoint). */
export function localEtcd(cfg: ClusterConfig, pki: PkiPaths): EtcdClientTls {
  return {
    url: etcdClientUrl(cfg.spec.storage.etcd.clientPort),
    caCert: pki.etcdCaCert,
    clientCert: pki.apiserverEtcdClientCert,
    clientKey: pki.apiserverEtcdClientKey,
  };
}

/** The etcd members (asked with a short timeout: status must answer without quorum too), or kine's datastore. */
export async function storageStatus(cfg: ClusterConfig, pki: PkiPaths): Promise<StorageStatus> {
  if (cfg.spec.storage.type === 'kine')
    return { type: 'kine', datastore: datastoreIdentity(cfg.spec.storage.kine.dataSource) ?? 'sqlite' };
  try {
    return { type: 'etcd', members: await listMembers(localEtcd(cfg, pki), 2000) };
  } catch (err) {
    return { type: 'etcd', members: [], error: messageOf(err) };
  }
}
