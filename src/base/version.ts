// kctl's own version: injected by the bundler into dist/kctl, read from package.json in a checkout.
import { readFileSync } from 'node:fs';

declare const __KCTL_VERSION__: string | undefined;

export const KCTL_VERSION: string =
  typeof __KCTL_VERSION__ === 'string'
    ? __KCTL_VERSION__
    : (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/** What one kctl executable is: its own version and the versions of what it carries. */
export interface Release {
  /** kctl's version (semver). */
  version: string;
  /** Kubernetes version of its components, e.g. v1.36.3. */
  kubernetes: string;
  /** etcd version it carries, e.g. v3.6.14. */
  etcd: string;
}
