// Where every PKI file lives under <data-dir>/pki. The names follow kubeadm, so operators
// who know kubeadm or k0s find them in one guess.
import { join, resolve } from 'node:path';

export interface PkiPaths {
  dir: string;
  etcdDir: string;
  /** The cluster CA's trust bundle: its signing certificate first, then any CA still trusted during a rotation. */
  caCert: string;
  caKey: string;
  /** The signing certificate of ca.key alone (kube-controller-manager's signers refuse a bundle). */
  caSigningCert: string;
  /**
   * The last CA rotation's cross-signature (base64): the old CA's key vouching for the new CA.
   * Public; published in cluster-info so that a node that missed the rotation can follow it.
   */
  caProof: string;
  /** kube-apiserver serving certificate. */
  serverCert: string;
  serverKey: string;
  /** kube-apiserver's client certificate towards kubelets (apiserver-kubelet-client.*). */
  kubeletClientCert: string;
  kubeletClientKey: string;
  frontProxyCaCert: string;
  frontProxyCaKey: string;
  frontProxyClientCert: string;
  frontProxyClientKey: string;
  /** Service-account token signing key pair; saPub is the PKIX public key. */
  saKey: string;
  saPub: string;
  etcdCaCert: string;
  etcdCaKey: string;
  etcdServerCert: string;
  etcdServerKey: string;
  etcdPeerCert: string;
  etcdPeerKey: string;
  apiserverEtcdClientCert: string;
  apiserverEtcdClientKey: string;
  /** Konnectivity server's TLS certificate for agents (signed by the cluster CA). */
  konnectivityCert: string;
  konnectivityKey: string;
  /** Signs the serving certificates of kctl's add-ons that kube-apiserver calls (metrics-server). */
  addonsCaCert: string;
  addonsCaKey: string;
  metricsServerCert: string;
  metricsServerKey: string;
  /**
   * Signs kubelet serving certificates and nothing else: no kctl client trusts it, so no
   * certificate a node can obtain passes as a control-plane server.
   */
  kubeletServingCaCert: string;
  kubeletServingCaKey: string;
  /** What kube-apiserver and metrics-server trust for kubelets: the kubelet-serving CA (and the cluster CA while nodes move over). */
  kubeletCaBundle: string;
  /** Present once no node serves a certificate of the cluster CA any more: the bundle then drops it. */
  kubeletServingMoved: string;
  /** kube-apiserver's EncryptionConfiguration with kctl's encryption-at-rest keys (0600; pki/encryption.ts). */
  encryptionConfig: string;
  adminConf: string;
  schedulerConf: string;
  controllerManagerConf: string;
}

export function pkiPaths(dir: string): PkiPaths {
  const root = resolve(dir);
  const at = (name: string): string => join(root, name);
  return {
    dir: root,
    etcdDir: at('etcd'),
    caCert: at('ca.crt'),
    caKey: at('ca.key'),
    caSigningCert: at('ca-signing.crt'),
    caProof: at('ca-rotation.proof'),
    serverCert: at('server.crt'),
    serverKey: at('server.key'),
    kubeletClientCert: at('apiserver-kubelet-client.crt'),
    kubeletClientKey: at('apiserver-kubelet-client.key'),
    frontProxyCaCert: at('front-proxy-ca.crt'),
    frontProxyCaKey: at('front-proxy-ca.key'),
    frontProxyClientCert: at('front-proxy-client.crt'),
    frontProxyClientKey: at('front-proxy-client.key'),
    saKey: at('sa.key'),
    saPub: at('sa.pub'),
    etcdCaCert: at('etcd/ca.crt'),
    etcdCaKey: at('etcd/ca.key'),
    etcdServerCert: at('etcd/server.crt'),
    etcdServerKey: at('etcd/server.key'),
    etcdPeerCert: at('etcd/peer.crt'),
    etcdPeerKey: at('etcd/peer.key'),
    apiserverEtcdClientCert: at('apiserver-etcd-client.crt'),
    apiserverEtcdClientKey: at('apiserver-etcd-client.key'),
    konnectivityCert: at('konnectivity.crt'),
    konnectivityKey: at('konnectivity.key'),
    addonsCaCert: at('addons-ca.crt'),
    addonsCaKey: at('addons-ca.key'),
    metricsServerCert: at('metrics-server.crt'),
    metricsServerKey: at('metrics-server.key'),
    kubeletServingCaCert: at('kubelet-serving-ca.crt'),
    kubeletServingCaKey: at('kubelet-serving-ca.key'),
    kubeletCaBundle: at('kubelet-ca-bundle.crt'),
    kubeletServingMoved: at('kubelet-serving-moved'),
    encryptionConfig: at('encryption-config.yaml'),
    adminConf: at('admin.conf'),
    schedulerConf: at('scheduler.conf'),
    controllerManagerConf: at('controller-manager.conf'),
  };
}

/**
 * Files under <data-dir>/pki that every controller of a cluster shares: its trust anchors and
 * keys (a joining controller gets them from the join endpoint; a control plane in a pod from a
 * mounted Secret, `kctl controller --shared-pki`). Every other PKI file is made from these.
 */
export const SHARED_PKI_FILES = [
  'ca.crt',
  'ca.key',
  'front-proxy-ca.crt',
  'front-proxy-ca.key',
  'sa.key',
  'sa.pub',
  'etcd/ca.crt',
  'etcd/ca.key',
  'addons-ca.crt',
  'addons-ca.key',
  'kubelet-serving-ca.crt',
  'kubelet-serving-ca.key',
  // The encryption-at-rest keys: without them a joiner's kube-apiserver cannot read a Secret.
  'encryption-config.yaml',
] as const;

export type SharedPkiFile = (typeof SHARED_PKI_FILES)[number];

const FOR_NODES: readonly SharedPkiFile[] = [
  'addons-ca.crt',
  'addons-ca.key',
  'kubelet-serving-ca.crt',
  'kubelet-serving-ca.key',
];
const FOR_ETCD: readonly SharedPkiFile[] = ['etcd/ca.crt', 'etcd/ca.key'];

/**
 * The shared files a control plane has (ensure.ts makes the same choice): all of them, or for an
 * api-only one (no nodes) all but the add-ons and kubelet-serving CAs, and the etcd CA only with etcd.
 */
export function sharedPkiFilesFor(apiOnly?: { etcd: boolean }): SharedPkiFile[] {
  if (!apiOnly) return [...SHARED_PKI_FILES];
  return SHARED_PKI_FILES.filter((f) => !FOR_NODES.includes(f) && (apiOnly.etcd || !FOR_ETCD.includes(f)));
}

/** A shared file's mode wherever it is written: keys (and the encryption keys' config) 0600. */
export const sharedPkiMode = (f: SharedPkiFile): number => (f.endsWith('.key') || f.endsWith('.yaml') ? 0o600 : 0o644);

/** A shared file's name outside the pki dir, flat (a Secret's keys have no '/'): etcd/ca.crt is etcd-ca.crt. */
export const sharedPkiName = (f: SharedPkiFile): string => f.replace('/', '-');
