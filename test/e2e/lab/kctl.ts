// Running the built executable in end-to-end tests.
import { execa, type Options, type Result } from 'execa';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

export const root = new URL('../../..', import.meta.url).pathname;
export const KCTL = process.env.KCTL_BIN ?? join(root, 'dist/kctl');

export function requireKctl(): string {
  if (!existsSync(KCTL)) throw new Error(`${KCTL} is missing; run npm run build (npm test does it first)`);
  return KCTL;
}

export function kctl(args: string[], opts: Options = {}): Promise<Result> {
  return execa(requireKctl(), args, { reject: false, all: false, timeout: 300_000, ...opts }) as Promise<Result>;
}
