// kube-public/cluster-info: the API address and the cluster's trust bundle, readable without
// credentials (joins) and by nodes (which follow a CA rotation from it).
export const CLUSTER_INFO_PATH = '/api/v1/namespaces/kube-public/configmaps/cluster-info';

/** Its key for the last CA rotation's cross-signature (pki/ca-rotation.ts vouchFor). */
export const CA_PROOF_KEY = 'kctl-ca-proof';
