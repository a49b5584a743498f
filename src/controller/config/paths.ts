// Every path the controller uses, derived from --data-dir and --run-dir in one place.
import { join } from 'node:path';
import { CURRENT } from '../../payload/versions.ts';

export interface ControllerPaths {
  dataDir: string;
  runDir: string;
  /** The staged versions of the components (payload/versions.ts). */
  binRoot: string;
  /** The current version's components: `current` under binRoot. */
  binDir: string;
  pkiDir: string;
  etcdDataDir: string;
  kineDbDir: string;
  kineSocket: string;
  statusSocket: string;
  /** kube-apiserver's GRPC frontend (spec.konnectivity.proxyProtocol: GRPC). */
  konnectivitySocket: string;
  /** kube-apiserver's HTTP-CONNECT frontend (the default). */
  konnectivityConnectSocket: string;
  egressConfig: string;
  manifestsDir: string;
}

/** `binRoot`: tenants (kctl controller --name) share the host's staged versions. */
export function controllerPaths(dataDir: string, runDir: string, binRoot = join(dataDir, 'bin')): ControllerPaths {
  return {
    dataDir,
    runDir,
    binRoot,
    binDir: join(binRoot, CURRENT),
    pkiDir: join(dataDir, 'pki'),
    etcdDataDir: join(dataDir, 'etcd'),
    kineDbDir: join(dataDir, 'db'),
    kineSocket: join(runDir, 'kine.sock'),
    statusSocket: join(runDir, 'status.sock'),
    konnectivitySocket: join(runDir, 'konnectivity-server.sock'),
    konnectivityConnectSocket: join(runDir, 'konnectivity-connect.sock'),
    egressConfig: join(dataDir, 'egress-selector.yaml'),
    manifestsDir: join(dataDir, 'manifests'),
  };
}
