// `kctl airgap save-images`: the carried images as they are staged, and the one made on demand.
import { join } from 'node:path';
import { mkdirShared } from '../base/fs.ts';
import type { Logger } from '../base/log.ts';
import { BUNDLED_IMAGES, KCTL_IMAGE } from './images.ts';
import { EmbeddedPayload, type Payload } from './payload.ts';
import { saveKctlImage, saveProxyAgentImage } from './self-images.ts';
import { saveImages } from './stage.ts';

/** Writes the named images (all when `names` is empty) into `dir`; returns each name and file, in list-images order. */
export async function saveBundledImages(
  payload: Payload,
  names: string[],
  dir: string,
  log: Logger,
): Promise<{ name: string; file: string }[]> {
  const unknown = names.filter((n) => !BUNDLED_IMAGES.some((i) => i.name === n));
  if (unknown.length)
    throw new Error(`kctl carries no image ${unknown.join(', ')}; kctl airgap list-images names those it does`);
  const wanted = BUNDLED_IMAGES.filter((i) => names.length === 0 || names.includes(i.name));
  // Images to hand on: a directory made here is readable by others, like the tarballs in it.
  await mkdirShared(dir);
  const carried = wanted.filter((i) => !i.onDemand).map((i) => i.name);
  if (carried.length) await saveImages(payload, carried, dir, log);
  for (const image of wanted.filter((i) => i.onDemand)) {
    if (!(payload instanceof EmbeddedPayload))
      throw new Error(
        `${image.name} is made from the kctl executable itself; run save-images with the built kctl (dist/kctl)`,
      );
    log.info({ image: image.name }, 'making the image from this executable');
    if (image.name === KCTL_IMAGE) await saveKctlImage(payload, join(dir, image.file), log);
    else await saveProxyAgentImage(payload, join(dir, image.file));
  }
  return wanted.map((i) => ({ name: i.name, file: join(dir, i.file) }));
}
