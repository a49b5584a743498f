// kctl's own version: injected by the bundler into dist/kctl, read from package.json in a checkout.
import { readFileSync } from 'node:fs';

declare const __KCTL_VERSION__: string | undefined;

export const KCTL_VERSION: string =
  typeof __KCTL_VERSION__ === 'string'
    ? __KCTL_VERSION__
    : (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
