// The images kctl carries instead of pulling from a registry (built by assets/build-images.ts,
// appended to dist/kctl, staged into <data-dir>/images and imported by workers), and the one it
// makes from itself on demand.
import { join } from 'node:path';
import { KCTL_VERSION } from '../base/version.ts';

export interface BundledImage {
  /** Full reference, as kubelet and `kctl airgap list-images` name it. */
  name: string;
  /** File name of its OCI image-layout tarball in the images cache and in <data-dir>/images. */
  file: string;
  /** Imported by kctl workers at start (default). The proxy-agent image is for other clusters. */
  workers?: boolean;
  /** Not carried in the payload: `kctl airgap save-images` makes it when asked. */
  onDemand?: boolean;
}

export const PAUSE_IMAGE = 'registry.k8s.io/pause:3.10';
export const BUSYBOX_IMAGE = 'docker.io/library/busybox:1.37';
// The add-ons' images keep upstream's names and tags, so their manifests read as usual.
export const COREDNS_IMAGE = 'registry.k8s.io/coredns/coredns:v1.15.0';
export const METRICS_SERVER_IMAGE = 'registry.k8s.io/metrics-server/metrics-server:v0.9.0';

/**
 * kctl itself as upstream's proxy-agent (entrypoint /proxy-agent, the kctl executable without its
 * component payload, with the C libraries Node needs): for konnectivity-agent DaemonSets and
 * Deployments of clusters that are not kctl's. Made from the running executable on demand
 * (self-images.ts).
 */
export const PROXY_AGENT_IMAGE = `kctl.local/proxy-agent:v${KCTL_VERSION}`;

/**
 * kctl itself, whole, for control planes run as pods on a management cluster (the runtime as
 * /usr/local/bin/kctl, the executable with its component payload beside it, the C libraries Node
 * needs). Made from the running executable on demand (self-images.ts).
 */
export const kctlImageOf = (version: string): string => `kctl.local/kctl:v${version}`;
export const KCTL_IMAGE = kctlImageOf(KCTL_VERSION);

/** The images kctl ships; `kctl airgap list-images` prints these names. */
export const BUNDLED_IMAGES: readonly BundledImage[] = [
  { name: PAUSE_IMAGE, file: 'pause-3.10.oci.tar' },
  { name: BUSYBOX_IMAGE, file: 'busybox-1.37.oci.tar' },
  { name: COREDNS_IMAGE, file: 'coredns-v1.15.0.oci.tar' },
  { name: METRICS_SERVER_IMAGE, file: 'metrics-server-v0.9.0.oci.tar' },
  { name: PROXY_AGENT_IMAGE, file: 'proxy-agent.oci.tar', workers: false, onDemand: true },
  { name: KCTL_IMAGE, file: 'kctl.oci.tar', workers: false, onDemand: true },
];

/** The images kctl workers import at start. */
export const WORKER_IMAGE_NAMES: ReadonlySet<string> = new Set(
  BUNDLED_IMAGES.filter((i) => i.workers !== false).map((i) => i.name),
);

export const BUNDLED_IMAGE_NAMES: readonly string[] = BUNDLED_IMAGES.map((i) => i.name);

/** The built tarballs in the images cache dir (`<cacheRoot()>/images`, written by assets/build-images.ts), in BUNDLED_IMAGES order. */
export function imageTarballs(cacheDir: string): string[] {
  return BUNDLED_IMAGES.map((i) => join(cacheDir, i.file));
}
