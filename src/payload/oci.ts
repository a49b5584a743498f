// OCI image-layout tarballs (oci-layout, index.json, blobs/sha256/...) of one layer (two over a
// packed base, for the conformance images), with
// fixed mtimes and ownership, so the same files always give the same bytes. Used by the build
// for the images kctl ships and by `kctl airgap save-images` for the proxy-agent image, which
// kctl makes from its own executable when asked.
import { createHash } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { constants as zlib, gzipSync, zstdCompressSync } from 'node:zlib';
import { create as tarCreate } from 'tar';

export const EPOCH = new Date('2025-01-01T00:00:00Z');
export const PATH_ENV = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

const MEDIA = {
  index: 'application/vnd.oci.image.index.v1+json',
  manifest: 'application/vnd.oci.image.manifest.v1+json',
  config: 'application/vnd.oci.image.config.v1+json',
  gzip: 'application/vnd.oci.image.layer.v1.tar+gzip',
  zstd: 'application/vnd.oci.image.layer.v1.tar+zstd',
};

interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
}

/** An image: its full name, its config, and a root filesystem to pack. */
export interface OciImage {
  name: string;
  /** Fills `root` and returns every path to pack, in the order they go into the layer (directories before their contents). */
  populate(root: string): Promise<string[]>;
  config: Record<string, unknown>;
  /**
   * How the layer is compressed: gzip (default) for images other runtimes pull, zstd (a quarter
   * smaller for Go binaries; containerd 1.5 and later read it) for those kctl's own workers import.
   */
  layerCodec?: 'gzip' | 'zstd';
  /** zstd's level for the layer: 19 by default (small, slow); lower for a layer of what is compressed already. */
  zstdLevel?: number;
  /** A root filesystem already packed (an uncompressed tar, e.g. a Debian base): the layer below `populate`'s. */
  baseTar?: string;
}

export const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

/** A tar of `entries` under `cwd`: fixed mtime, uid/gid 0, no user names, in the given order. */
async function packTar(cwd: string, entries: string[]): Promise<Buffer> {
  const out = join(cwd, '..', `.${process.pid}.${Date.now()}.tar`);
  // node-tar's `portable` would also clear group/other write bits (a 1777 /tmp becomes 1755),
  // so each entry is normalised here instead: owner root, no user name, the file's own mode.
  const normalise = (e: unknown) => {
    const entry = e as {
      portable: boolean;
      myuid: number;
      stat: { uid: number; gid: number; atime: Date; ctime: Date };
    };
    entry.portable = false;
    entry.myuid = -1;
    entry.stat.uid = 0;
    entry.stat.gid = 0;
    // Non-portable headers carry atime and ctime too.
    entry.stat.atime = EPOCH;
    entry.stat.ctime = EPOCH;
  };
  await tarCreate({ cwd, file: out, mtime: EPOCH, noDirRecurse: true, noPax: true, onWriteEntry: normalise }, entries);
  const buf = await readFile(out);
  await rm(out, { force: true });
  return buf;
}

async function writeBlob(blobs: string, data: Buffer, mediaType: string): Promise<Descriptor> {
  const digest = sha256(data);
  await writeFile(join(blobs, digest), data);
  return { mediaType, digest: `sha256:${digest}`, size: data.length };
}

/**
 * Base tars packed so far in this process, by path (a base is made once and not changed while the
 * build runs): images that share a base compress and hash it once.
 */
const packedBases = new Map<string, { gz: Buffer; diffId: string }>();

async function packedBase(path: string): Promise<{ gz: Buffer; diffId: string }> {
  let packed = packedBases.get(path);
  if (!packed) {
    const tar = await readFile(path);
    packed = { gz: gzipSync(tar, { level: 6 }), diffId: `sha256:${sha256(tar)}` };
    packedBases.set(path, packed);
  }
  return packed;
}

/** Writes `spec` as an OCI image-layout tarball at `target` (atomically). */
export async function buildImage(spec: OciImage, target: string): Promise<void> {
  const work = await mkdtemp(join(tmpdir(), 'kctl-image-'));
  try {
    const rootfs = join(work, 'rootfs');
    await mkdir(rootfs);
    const entries = await spec.populate(rootfs);
    if (entries.length === 0 && !spec.baseTar) throw new Error(`image ${spec.name} has no files`);
    // An image that only configures its base (a user, a command) adds no layer of its own.
    const layerTar = entries.length ? await packTar(rootfs, entries) : undefined;
    // Both depend on the tar bytes only (zlib writes gzip's mtime 0 and a fixed OS byte).
    const zstd = spec.layerCodec === 'zstd';
    const packed =
      layerTar &&
      (zstd
        ? zstdCompressSync(layerTar, { params: { [zlib.ZSTD_c_compressionLevel]: spec.zstdLevel ?? 19 } })
        : gzipSync(layerTar, { level: 9 }));

    const layout = join(work, 'layout');
    const blobs = join(layout, 'blobs', 'sha256');
    await mkdir(blobs, { recursive: true });
    const base = spec.baseTar ? await packedBase(spec.baseTar) : undefined;
    const baseLayer = base && (await writeBlob(blobs, base.gz, MEDIA.gzip));
    const layer = packed && (await writeBlob(blobs, packed, zstd ? MEDIA.zstd : MEDIA.gzip));
    const layers = [baseLayer, layer].filter((l): l is Descriptor => !!l);
    const diffIds = [base?.diffId, layerTar && `sha256:${sha256(layerTar)}`].filter((d): d is string => !!d);
    const config = await writeBlob(
      blobs,
      Buffer.from(
        JSON.stringify({
          created: EPOCH.toISOString(),
          architecture: 'amd64',
          os: 'linux',
          config: spec.config,
          rootfs: { type: 'layers', diff_ids: diffIds },
          history: [{ created: EPOCH.toISOString(), created_by: 'kctl' }],
        }),
      ),
      MEDIA.config,
    );
    const manifest = await writeBlob(
      blobs,
      Buffer.from(
        JSON.stringify({
          schemaVersion: 2,
          mediaType: MEDIA.manifest,
          config,
          layers,
        }),
      ),
      MEDIA.manifest,
    );
    const tag = spec.name.slice(spec.name.lastIndexOf(':') + 1);
    await writeFile(join(layout, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
    await writeFile(
      join(layout, 'index.json'),
      JSON.stringify({
        schemaVersion: 2,
        mediaType: MEDIA.index,
        manifests: [
          {
            ...manifest,
            platform: { architecture: 'amd64', os: 'linux' },
            // docker/nerdctl save convention: ref.name is the tag; containerd reads the full name.
            annotations: { 'io.containerd.image.name': spec.name, 'org.opencontainers.image.ref.name': tag },
          },
        ],
      }),
    );
    const blobNames = [...layers, config, manifest].map((d) => d.digest.slice('sha256:'.length)).sort();
    const outer = await packTar(layout, [
      'oci-layout',
      'index.json',
      'blobs',
      'blobs/sha256',
      ...blobNames.map((b) => `blobs/sha256/${b}`),
    ]);
    await mkdir(dirname(target), { recursive: true });
    await writeFile(`${target}.tmp`, outer);
    await chmod(`${target}.tmp`, 0o644); // an image to hand on, as staging writes the bundled ones
    await rename(`${target}.tmp`, target);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}
