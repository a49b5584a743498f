// Image bundles without a registry: the images kctl builds itself (assets/build-images.ts)
// and the one-shot component that imports every tarball in <data-dir>/images into
// containerd's `k8s.io` namespace, where the CRI plugin (and so kubelet) sees them.
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { list as tarList } from 'tar';
import type { Logger } from '../base/log.ts';
import type { Component } from '../base/component.ts';
import { reasonOf } from '../base/wait.ts';
import type { WorkerPaths } from './paths.ts';
import { PAUSE_IMAGE } from '../payload/images.ts';

/** containerd namespace the CRI plugin uses. */
export const CRI_NAMESPACE = 'k8s.io';
/** Label that keeps an image from kubelet's image garbage collection. */
export const PINNED_LABEL = 'io.cri-containerd.pinned=pinned';

interface OciIndex {
  manifests?: { digest: string; annotations?: Record<string, string> }[];
}

/** Image name -> manifest digest, from an OCI layout tarball's index.json; empty for other archives (e.g. docker-archive). */
export async function tarballImages(file: string): Promise<Map<string, string>> {
  let text = '';
  await tarList({
    file,
    filter: (p) => p === 'index.json' || p === './index.json',
    onReadEntry: (entry) => {
      entry.on('data', (c: Buffer) => {
        text += c.toString('utf8');
      });
    },
  });
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
  log: Logger;
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

  constructor(private readonly opts: ImagesOptions) {
    this.ctr = join(opts.paths.binDir, 'ctr');
    this.pinned = opts.pinned ?? [PAUSE_IMAGE];
  }

  async ready(signal: AbortSignal): Promise<void> {
    await this.importAll(signal);
  }

  /** Imports what is missing or changed; returns the tarballs it imported. */
  async importAll(signal?: AbortSignal): Promise<string[]> {
    const { log, paths } = this.opts;
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
