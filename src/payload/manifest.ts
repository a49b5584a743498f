// The pinned component set (assets/components.json) and where its builds are cached.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

export type Role = 'controller' | 'worker' | 'interop' | 'image';

export interface SourcePin {
  module: string;
  version: string;
  /** Version to use for modules that upstream replaces with in-repo paths (k8s staging). */
  stagingVersion?: string;
  noSumDb?: boolean;
  cgo: boolean;
  cflags?: string;
  tags?: string[];
  ldflags: string;
  /**
   * A Go main file (path from the checkout root) that builds every component of this source
   * as one multi-call binary, chosen by the name it runs as; each component is a hard link to it.
   */
  multiCall?: string;
}

export interface ComponentPin {
  name: string;
  source: string;
  package: string;
  roles: Role[];
  /** Subdirectory of bin/ (CNI plugins live in bin/cni). */
  dir?: string;
  versionCheck?: { args: string[]; expect: string };
  download?: { url: string; member?: string; sha256: string | null; sha256Url?: string };
}

/** Staged into <data-dir>/bin by a role; `interop` builds serve tests only and `image` builds are packed into images. */
export function isStagedBinary(c: { roles: readonly Role[] }): boolean {
  return c.roles.includes('controller') || c.roles.includes('worker');
}

export interface Manifest {
  platform: string;
  sources: Record<string, SourcePin>;
  components: ComponentPin[];
}

/** What a finished build (or download) recorded for each component. */
export interface LockEntry {
  name: string;
  version: string;
  sha256: string;
  size: number;
  path: string;
  roles: Role[];
}

export interface PayloadLock {
  key: string;
  platform: string;
  components: LockEntry[];
}

export function manifestPath(): string {
  return new URL('../../assets/components.json', import.meta.url).pathname;
}

/** A multi-call main file's path in this checkout. */
export function multiCallMain(pin: SourcePin): string | undefined {
  return pin.multiCall && new URL(`../../${pin.multiCall}`, import.meta.url).pathname;
}

/** The build cache key: only what changes the built bytes (not comments or download pins; a multi-call main by content). */
export function buildKey(m: Manifest): string {
  const strip = (o: object) => Object.fromEntries(Object.entries(o).filter(([k]) => !k.startsWith('$')));
  const mainHash = (pin: SourcePin) => {
    const main = multiCallMain(pin);
    return main ? { multiCall: createHash('sha256').update(readFileSync(main)).digest('hex') } : {};
  };
  const sources = Object.fromEntries(Object.entries(m.sources).map(([k, v]) => [k, { ...strip(v), ...mainHash(v) }]));
  const components = m.components.map((c) => [c.name, c.source, c.package, c.dir ?? '']);
  return createHash('sha256')
    .update(JSON.stringify({ platform: m.platform, sources, components }))
    .digest('hex')
    .slice(0, 16);
}

/** A pin set and its build cache key. */
export interface ComponentSet {
  manifest: Manifest;
  key: string;
}

export function loadManifest(path = manifestPath()): ComponentSet {
  const manifest = JSON.parse(readFileSync(path, 'utf8')) as Manifest;
  return { manifest, key: buildKey(manifest) };
}

/** Outside the checkout, so fresh clones on the same machine reuse builds. */
export function cacheRoot(): string {
  return process.env.KCTL_CACHE_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'kctl');
}

/** Where the build of the pin set with this key is cached (bin/ and payload.lock.json). */
export function componentsDir(key: string): string {
  return join(cacheRoot(), 'components', key);
}

export function componentVersion(manifest: Manifest, c: ComponentPin): string {
  const source = manifest.sources[c.source];
  if (!source) throw new Error(`component ${c.name}: unknown source ${c.source} in assets/components.json`);
  return source.version;
}

export function componentRelPath(c: ComponentPin): string {
  return c.dir ? `${c.dir}/${c.name}` : c.name;
}
