// The images kctl carries instead of pulling from a registry (built by assets/build-images.ts,
// appended to dist/kctl, staged into <data-dir>/images and imported by workers).
import { join } from 'node:path';

export interface BundledImage {
  /** Full reference, as kubelet and `kctl airgap list-images` name it. */
  name: string;
  /** File name of its OCI image-layout tarball in the images cache and in <data-dir>/images. */
  file: string;
}

export const PAUSE_IMAGE = 'registry.k8s.io/pause:3.10';
export const BUSYBOX_IMAGE = 'docker.io/library/busybox:1.36';
// The add-ons' images keep upstream's names and tags, so their manifests read as usual.
export const COREDNS_IMAGE = 'registry.k8s.io/coredns/coredns:v1.15.0';
export const METRICS_SERVER_IMAGE = 'registry.k8s.io/metrics-server/metrics-server:v0.9.0';

/** The images kctl ships; `kctl airgap list-images` prints these names. */
export const BUNDLED_IMAGES: readonly BundledImage[] = [
  { name: PAUSE_IMAGE, file: 'pause-3.10.oci.tar' },
  { name: BUSYBOX_IMAGE, file: 'busybox-1.36.oci.tar' },
  { name: COREDNS_IMAGE, file: 'coredns-v1.15.0.oci.tar' },
  { name: METRICS_SERVER_IMAGE, file: 'metrics-server-v0.9.0.oci.tar' },
];

export const BUNDLED_IMAGE_NAMES: readonly string[] = BUNDLED_IMAGES.map((i) => i.name);

/** The built tarballs in the images cache dir (`<cacheRoot()>/images`, written by assets/build-images.ts), in BUNDLED_IMAGES order. */
export function imageTarballs(cacheDir: string): string[] {
  return BUNDLED_IMAGES.map((i) => join(cacheDir, i.file));
}
