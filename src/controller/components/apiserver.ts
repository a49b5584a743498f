// kube-apiserver: secure serving on spec.api.port, etcd or kine storage, bootstrap tokens,
// Node+RBAC, the aggregation layer, and (once the konnectivity server runs) the egress selector.
// The api-only profile keeps storage, RBAC and the aggregation layer and drops what nodes need.
import { componentFlags } from '../../base/argv.ts';
import { join } from 'node:path';
import { etcdClientUrl } from '../../etcd/etcd.ts';
import { kineEndpoint } from '../../etcd/kine.ts';
import type { PkiPaths } from '../../pki/index.ts';
import { Supervisor } from '../../supervisor/process.ts';
import { auditFlags } from '../encryption/audit.ts';
import { type ClusterConfig } from '../config/config.ts';
import { doorOnly, frontDoorEndpoint } from '../config/urls.ts';
import { goRuntimeEnv } from './go-runtime.ts';
import type { ControllerPaths } from '../config/paths.ts';
import { httpsReady } from '../../base/probe.ts';

/** The program: its binary in <bin>, its pid file in <run>, its component's name. */
export const KUBE_APISERVER = 'kube-apiserver';

export function serviceAccountIssuer(cfg: ClusterConfig): string {
  return `https://kubernetes.default.svc.${cfg.spec.network.clusterDomain}`;
}

/**
 * API groups an api-only control plane does not serve: workloads, scheduling, storage and node
 * runtime APIs, which do nothing without nodes. Each served group costs memory (storage, handlers,
 * OpenAPI). The admission plugins that watch some of them go too.
 */
export const API_ONLY_DISABLED_APIS = [
  'apps/v1',
  'batch/v1',
  'autoscaling/v1',
  'autoscaling/v2',
  'policy/v1',
  'node.k8s.io/v1',
  'scheduling.k8s.io/v1',
  'storage.k8s.io/v1',
  'resource.k8s.io/v1',
];
const API_ONLY_FLAGS: Record<string, string | boolean> = {
  'authorization-mode': 'RBAC',
  'runtime-config': API_ONLY_DISABLED_APIS.map((g) => `${g}=false`).join(','),
  'disable-admission-plugins':
    'Priority,DefaultStorageClass,RuntimeClass,PersistentVolumeClaimResize,StorageObjectInUseProtection',
  // Lists and watches are served from storage: no second copy of every object in memory.
  'watch-cache': false,
  // No pods use the kubernetes Service here; its Endpoints need not follow the API server.
  'endpoint-reconciler-type': 'none',
};
/** The api-only kube-apiserver's default Go soft memory limit (spec.api.memoryLimit overrides it). */
export const API_ONLY_MEMORY_LIMIT = '120MiB';

/** What only a control plane with nodes needs: kubelet access, node authorization, bootstrap tokens, the tunnel's audience. */
function nodeFlags(cfg: ClusterConfig, pki: PkiPaths): Record<string, string | boolean> {
  return {
    'api-audiences': `${serviceAccountIssuer(cfg)},system:konnectivity-server`,
    'enable-bootstrap-token-auth': true,
    'authorization-mode': 'Node,RBAC',
    'enable-admission-plugins': 'NodeRestriction',
    'allow-privileged': true,
    'kubelet-client-certificate': pki.kubeletClientCert,
    'kubelet-client-key': pki.kubeletClientKey,
    // A kubelet by its node's name first: the tunnel routes the name to the agent whose certificate
    // is that node, so two nodes behind two NATs with the same address are still told apart.
    'kubelet-preferred-address-types': 'Hostname,InternalIP,ExternalIP',
    // Verify every kubelet's serving certificate: kube-controller-manager signs them with the
    // kubelet-serving CA, and kctl's csr-approver approves them only for names and addresses the
    // node owns (the bundle holds the cluster CA too while an older cluster's nodes move over).
    'kubelet-certificate-authority': pki.kubeletCaBundle,
    // Behind a front door pods reach the API at the node-local address, which kctl writes as the
    // kubernetes Service's endpoint (cluster/kubernetes-endpoints.ts); kube-apiserver would write its own.
    ...(frontDoorEndpoint(cfg) ? { 'endpoint-reconciler-type': 'none' } : {}),
  };
}

export function apiserverArgs(
  cfg: ClusterConfig,
  paths: ControllerPaths,
  pki: PkiPaths,
  opts: { egress: boolean },
): string[] {
  const apiOnly = cfg.spec.profile === 'api-only';
  const storage: Record<string, string> =
    cfg.spec.storage.type === 'etcd'
      ? {
          'etcd-servers': etcdClientUrl(cfg.spec.storage.etcd.clientPort),
          'etcd-cafile': pki.etcdCaCert,
          'etcd-certfile': pki.apiserverEtcdClientCert,
          'etcd-keyfile': pki.apiserverEtcdClientKey,
        }
      : { 'etcd-servers': kineEndpoint(paths.kineSocket) };
  return componentFlags(
    {
      'advertise-address': cfg.spec.api.address,
      // Only the door open: the door reaches kube-apiserver on loopback, nothing else does from outside.
      'bind-address': doorOnly(cfg) ? '127.0.0.1' : '0.0.0.0',
      'secure-port': cfg.spec.api.port,
      'tls-cert-file': pki.serverCert,
      'tls-private-key-file': pki.serverKey,
      'client-ca-file': pki.caCert,
      ...storage,
      // Encryption at rest (pki/encryption.ts); reloaded within a minute of a change (key rotation, controller/encryption/encryption.ts).
      'encryption-provider-config': pki.encryptionConfig,
      'encryption-provider-config-automatic-reload': true,
      'service-cluster-ip-range': cfg.spec.network.serviceCIDR,
      'service-account-issuer': serviceAccountIssuer(cfg),
      'service-account-key-file': pki.saPub,
      'service-account-signing-key-file': pki.saKey,
      ...(apiOnly ? API_ONLY_FLAGS : nodeFlags(cfg, pki)),
      'proxy-client-cert-file': pki.frontProxyClientCert,
      'proxy-client-key-file': pki.frontProxyClientKey,
      'requestheader-client-ca-file': pki.frontProxyCaCert,
      'requestheader-allowed-names': 'front-proxy-client',
      'requestheader-username-headers': 'X-Remote-User',
      'requestheader-group-headers': 'X-Remote-Group',
      'requestheader-extra-headers-prefix': 'X-Remote-Extra-',
      // Aggregated APIs and webhooks are dialled at their endpoints' pod IPs: through the tunnel
      // any agent reaches a pod IP over the node routes, with no kube-proxy rule in between.
      ...(apiOnly ? {} : { 'enable-aggregator-routing': true }),
      profiling: false,
      ...auditFlags(cfg, paths.dataDir),
      ...(opts.egress && !apiOnly ? { 'egress-selector-config-file': paths.egressConfig } : {}),
    },
    cfg.spec.api.extraArgs,
  );
}

export class ApiserverComponent extends Supervisor {
  readonly readyTimeoutMs = 180_000;

  constructor(cfg: ClusterConfig, paths: ControllerPaths, pki: PkiPaths, opts: { egress: boolean }) {
    super({
      name: KUBE_APISERVER,
      binary: join(paths.binDir, KUBE_APISERVER),
      args: apiserverArgs(cfg, paths, pki, opts),
      env: goRuntimeEnv(
        cfg,
        cfg.spec.api.memoryLimit ?? (cfg.spec.profile === 'api-only' ? API_ONLY_MEMORY_LIMIT : undefined),
      ),
      runDir: paths.runDir,
      // /readyz is open to anonymous users (system:public-info-viewer). Its first start takes seconds
      // and everything else waits for it: probed every 200 ms at most, not every 500 ms.
      ready: httpsReady({ url: `https://127.0.0.1:${cfg.spec.api.port}/readyz`, ca: pki.caCert }, KUBE_APISERVER, 200),
    });
  }
}
