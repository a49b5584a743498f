// The controller's PKI: certificate authorities, leaf certificates, the service-account key
// and component kubeconfigs under <data-dir>/pki. See ensure.ts for the rules.
export { CONTROL_PLANE_USERS, ensurePki, ensurePkiFiles, wantedSans, type PkiOptions } from './ensure.ts';
export { CertificateWatch, controllerCertificates, type CertificateStatus, type WatchedCertificate } from './watch.ts';
export { renewalTime, DEFAULT_LEAF_VALIDITY_MS, MIN_LEAF_VALIDITY_MS } from './leaf.ts';
export { pkiPaths, type PkiPaths } from './paths.ts';
export { writeKubeconfig, readKubeconfig, renderKubeconfig, type KubeconfigContent } from './kubeconfig.ts';
export { firstServiceIps } from './addresses.ts';
export { parseCert, sansOf } from './x509.ts';
export { PkiError } from './errors.ts';
export { issueUserCert } from './user-cert.ts';
export {
  encryptionConfigHash,
  newEncryptionKey,
  parseEncryptionKeys,
  readEncryptionKeys,
  renderEncryptionConfig,
  writeEncryptionConfig,
  type EncryptionKey,
} from './encryption.ts';
export {
  bundleHash,
  CA_ROTATION_PHASES,
  caFilesFor,
  caPhaseOnDisk,
  newClusterCa,
  rotationProblem,
  signedByFirst,
  unvouched,
  vouchFor,
  writeCaPhase,
  type CaRotation,
  type CaRotationPhase,
} from './ca-rotation.ts';
export { bundleOf, splitCertificates } from '../base/pem.ts';
export { caSign, caSigner } from './ca-signature.ts';
export { certificateRequestPem, generateKeyPem, parseKey } from './x509.ts';
