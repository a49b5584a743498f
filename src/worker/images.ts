// Image bundles without a registry: the images kctl builds itself (assets/build-images.ts)
// and the one-shot component that imports every tarball in <data-dir>/images into
// containerd's `k8s.io` namespace, where the CRI plugin (and so kubelet) sees them.
import { open, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import type { Logger } from '../base/log.ts';
import type { Component, ComponentContext } from '../base/component.ts';
import type { WorkerPaths } from './paths.ts';
import { PAUSE_IMAGE } from '../payload/images.ts';
import { reasonOf } from '../base/errors.ts';

/** containerd namespace the CRI plugin uses. */
export const CRI_NAMESPACE = 'k8s.io';
/** Label that keeps an image from kubelet's image garbage collection. */
export const PINNED_LABEL = 'io.cri-containerd.pinned=pinned';

interface OciIndex {
  manifests?: { digest: string; annotations?: Record<string, string> }[];
}

const BLOCK = 512;

/** A tar header's numeric field: octal text, or GNU base-256 when the high bit is set. */
function tarNumber(field: Buffer): number {
  if ((field[0]! & 0x80) !== 0) return field.subarray(1).reduce((n, b) => n * 256 + b, 0);
  return parseInt(
    field
      .toString('latin1')
      .replace(/[\0 ]+$/, '')
      .trim() || '0',
    8,
  );
}

/** The `path` record of a pax extended header, if any. */
function paxPath(body: Buffer): string | undefined {
  for (const rec of body.toString('utf8').split('\n')) {
    const m = /^\d+ path=(.*)$/.exec(rec);
    if (m) return m[1];
  }
  return undefined;
}

/**
 * The bytes of `wanted` in a tar file, reading only headers and that one entry. Listing with a
 * stream parser reads the whole tarball (100+ MB of image layers) through the heap of a worker
 * that then idles for months; this seeks from header to header instead.
 */
export async function readTarEntry(file: string, wanted: (path: string) => boolean): Promise<Buffer | undefined> {
  const fh = await open(file, 'r');
  try {
    const header = Buffer.alloc(BLOCK);
    let pos = 0;
    let longName: string | undefined;
    for (;;) {
      if ((await fh.read(header, 0, BLOCK, pos)).bytesRead < BLOCK || header.every((b) => b === 0)) return undefined;
      const size = tarNumber(header.subarray(124, 136));
      const type = String.fromCharCode(header[156]!);
      const body = async () => {
        const buf = Buffer.alloc(size);
        await fh.read(buf, 0, size, pos + BLOCK);
        return buf;
      };
      const cut = (b: Buffer) => b.toString('utf8').replace(/\0.*$/s, '');
      const prefix = header.toString('latin1', 257, 262) === 'ustar' ? cut(header.subarray(345, 500)) : '';
      const name = longName ?? (prefix ? `${prefix}/${cut(header.subarray(0, 100))}` : cut(header.subarray(0, 100)));
      if (type === 'x') longName = paxPath(await body());
      else if (type === 'L') longName = cut(await body());
      else {
        longName = undefined;
        if ((type === '0' || type === '\0') && wanted(name.replace(/^\.\//, ''))) return await body();
      }
      pos += BLOCK + Math.ceil(size / BLOCK) * BLOCK;
    }
  } finally {
    await fh.close();
  }
}

/** Image name -> manifest digest, from an OCI layout tarball's index.json; empty for other archives (e.g. docker-archive). */
export async function tarballImages(file: string): Promise<Map<string, string>> {
  const text = (await readTarEntry(file, (p) => p === 'index.json'))?.toString('utf8') ?? '';
  const out = new Map<string, string>();
  if (!text) return out;
  const index = JSON.parse(text) as OciIndex;
  for (const m of index.manifests ?? []) {
    const name = m.annotations?.['io.containerd.image.name'] ?? m.annotations?.['org.opencontainers.image.ref.name'];
    if (name && name.includes('/')) out.set(name, m.digest);
  }
  return out;
}

/** `ctr images ls` output: image name -> target digest. */
export function parseImageList(stdout: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of stdout.split('\n').slice(1)) {
    const [ref, , digest] = line.trim().split(/\s+/);
    if (ref && digest?.startsWith('sha256:')) out.set(ref, digest);
  }
  return out;
}

export interface ImagesOptions {
  paths: WorkerPaths;
  /** Outside a component manager (e.g. a test importing once): the logger. Under one, the manager's at init. */
  log?: Logger;
  /** Images to pin against kubelet's image GC (default: the pause image). */
  pinned?: readonly string[];
}

/**
 * One-shot: ready() imports every tarball in paths.imagesDir whose images containerd does not
 * already hold at the same digest, then pins the sandbox image. Needs containerd running.
 */
export class ImagesComponent implements Component {
  readonly name = 'images';
  readonly readyTimeoutMs = 300_000;
  private readonly ctr: string;
  private readonly pinned: readonly string[];
  private contextLog: Logger | undefined;

  constructor(private readonly opts: ImagesOptions) {
    this.ctr = join(opts.paths.binDir, 'ctr');
    this.pinned = opts.pinned ?? [PAUSE_IMAGE];
  }

  async init(ctx: ComponentContext): Promise<void> {
    this.contextLog = ctx.log;
  }

  async ready(signal: AbortSignal): Promise<void> {
    await this.importAll(signal);
  }

  /** Imports what is missing or changed; returns the tarballs it imported. */
  async importAll(signal?: AbortSignal): Promise<string[]> {
    const { paths } = this.opts;
    const log = this.opts.log ?? this.contextLog;
    if (!log) throw new Error('images: no logger; run it under a component manager (init) or pass log');
    const files = (await readdir(paths.imagesDir).catch(() => [] as string[])).filter((f) => f.endsWith('.tar')).sort();
    let present = await this.listImages(signal);
    const imported: string[] = [];
    for (const f of files) {
      const file = join(paths.imagesDir, f);
      const wanted = await tarballImages(file).catch((err: unknown) => {
        throw new Error(`cannot read image bundle ${file}: ${reasonOf(err)}`);
      });
      if (wanted.size > 0 && [...wanted].every(([name, digest]) => present.get(name) === digest)) {
        log.debug({ file }, 'image bundle already imported');
        continue;
      }
      const r = await this.ctrRun(['images', 'import', '--all-platforms', file], signal);
      if (r.exitCode !== 0) throw new Error(`importing ${file} failed: ${lastLine(r.stderr)}`);
      imported.push(file);
      log.info({ file, images: [...wanted.keys()] }, 'imported image bundle');
    }
    if (imported.length) present = await this.listImages(signal);
    for (const name of this.pinned) {
      if (!present.has(name)) {
        log.warn({ image: name }, `${name} is not in containerd; pods need it unless a registry serves it`);
        continue;
      }
      const r = await this.ctrRun(['images', 'label', name, PINNED_LABEL], signal);
      if (r.exitCode !== 0) throw new Error(`pinning ${name} failed: ${lastLine(r.stderr)}`);
    }
    log.info({ bundles: files.length, imported: imported.length }, 'images ready');
    return imported;
  }

  private async listImages(signal?: AbortSignal): Promise<Map<string, string>> {
    const r = await this.ctrRun(['images', 'ls'], signal);
    if (r.exitCode !== 0) throw new Error(`listing containerd images failed: ${lastLine(r.stderr)}`);
    return parseImageList(r.stdout);
  }

  private ctrRun(args: string[], signal?: AbortSignal) {
    return execa(this.ctr, ['--address', this.opts.paths.containerdSocket, '--namespace', CRI_NAMESPACE, ...args], {
      reject: false,
      extendEnv: false,
      env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' },
      timeout: 120_000,
      cancelSignal: signal,
    });
  }
}

function lastLine(s: string): string {
  return s.trim().split('\n').pop() ?? '';
}
