// Every path a worker uses lives under its --data-dir and --run-dir, so two workers can run
// on one host (in separate network namespaces) and `kctl reset` can remove all of it.
import { join } from 'node:path';
import { CURRENT } from '../payload/versions.ts';

export interface WorkerPaths {
  dataDir: string;
  runDir: string;
  /** The staged versions of the components (payload/versions.ts). */
  binRoot: string;
  /** The current version's components: `current` under binRoot. */
  binDir: string;
  cniBinDir: string;
  cniConfDir: string;
  cniStateDir: string;
  pkiDir: string; // ca.crt from the join token
  caCert: string;
  bootstrapKubeconfig: string; // written once at join, from the token
  kubeletKubeconfig: string; // written by kubelet's TLS bootstrap
  kubeletDir: string; // kubelet --root-dir
  kubeletCertDir: string; // kubelet-client-current.pem, kubelet-server-current.pem
  /** kubelet's client certificate and key in one file (it rotates them): the node's own identity. */
  kubeletClientPem: string;
  kubeletConfig: string;
  /** The worker profile kubelet runs with (its name and fields), as last read from the cluster. */
  kubeletProfile: string;
  /** The cgroup root kubelet was given at the first start (kubelet.ts kubeletCgroupRoot). */
  cgroupRootFile: string;
  podLogsDir: string;
  containerdRoot: string;
  containerdState: string;
  containerdSocket: string;
  containerdConfig: string;
  imagesDir: string; // OCI / docker-archive tarballs imported at start
  kubeProxyConfig: string;
  kubeProxyKubeconfig: string;
  joinMarker: string; // present once the token was accepted
  statusSocket: string;
  /** wireguard-go's working directory: its UAPI socket (kctl-wg.sock) lives there. */
  wireguardRunDir: string;
  /** This node's WireGuard private key (0600; it never leaves the node). */
  wireguardKey: string;
}

export function workerPaths(dataDir: string, runDir: string): WorkerPaths {
  const kubeletDir = join(dataDir, 'kubelet');
  return {
    dataDir,
    runDir,
    binRoot: join(dataDir, 'bin'),
    binDir: join(dataDir, 'bin', CURRENT),
    cniBinDir: join(dataDir, 'bin', CURRENT, 'cni'),
    cniConfDir: join(dataDir, 'cni', 'net.d'),
    cniStateDir: join(dataDir, 'cni', 'state'),
    pkiDir: join(dataDir, 'pki'),
    caCert: join(dataDir, 'pki', 'ca.crt'),
    bootstrapKubeconfig: join(dataDir, 'kubelet-bootstrap.conf'),
    kubeletKubeconfig: join(dataDir, 'kubelet.conf'),
    kubeletDir,
    kubeletCertDir: join(kubeletDir, 'pki'),
    kubeletClientPem: join(kubeletDir, 'pki', 'kubelet-client-current.pem'),
    kubeletConfig: join(dataDir, 'kubelet-config.yaml'),
    kubeletProfile: join(dataDir, 'kubelet-profile.json'),
    cgroupRootFile: join(dataDir, 'kubelet-cgroup-root'),
    podLogsDir: join(dataDir, 'pod-logs'),
    containerdRoot: join(dataDir, 'containerd'),
    containerdState: join(runDir, 'containerd'),
    containerdSocket: join(runDir, 'containerd', 'containerd.sock'),
    containerdConfig: join(dataDir, 'containerd.toml'),
    imagesDir: join(dataDir, 'images'),
    kubeProxyConfig: join(dataDir, 'kube-proxy-config.yaml'),
    kubeProxyKubeconfig: join(dataDir, 'kube-proxy.conf'),
    joinMarker: join(dataDir, 'joined'),
    statusSocket: join(runDir, 'status.sock'),
    wireguardRunDir: join(runDir, 'wireguard'),
    wireguardKey: join(dataDir, 'wireguard', 'private.key'),
  };
}
