// `npm run test-builds` (npm test runs it after `npm run build`): the extra kctl executables the
// upgrade tests need (assets/test-kctls.ts), made by build-kctl.ts from the same code as dist/kctl.
// dist/kctl-previous carries a pin set derived in code from assets/components.json with the
// previous Kubernetes release (kubernetes-pins.ts): it has a cache key of its own, only its
// Kubernetes source is built (10-20 minutes on 2 cores, once per machine), and every other
// component is hard-linked from dist/kctl's build cache. An executable is rebuilt only when what
// it is made of changed: dist/kctl's bytes (code, runtime, launcher, images), its components, its
// version, or these build scripts.
import { createHash } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { loadManifest, type ComponentSet } from '../src/payload/manifest.ts';
import { buildComponents } from './build-components.ts';
import { buildKctl } from './build-kctl.ts';
import { withKubernetesVersion } from './kubernetes-pins.ts';
import { TEST_KCTLS, type TestKctl } from './test-kctls.ts';

const root = new URL('..', import.meta.url).pathname;
const mainKctl = join(root, 'dist/kctl');
const BUILDERS = ['assets/build-kctl.ts', 'assets/build-test-kctls.ts', 'assets/test-kctls.ts'];

async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  await pipeline(createReadStream(path), hash);
  return hash.digest('hex');
}

/** What `t` is made of, as one hash: rebuilt when it changes. */
async function inputsOf(t: TestKctl, components: ComponentSet, base: ComponentSet, kctlSha: string): Promise<string> {
  const { lock } = await buildComponents(components, base);
  const builders = await Promise.all(BUILDERS.map((f) => sha256File(join(root, f))));
  const inputs = {
    kctl: kctlSha,
    components: lock.components,
    version: t.version,
    cannotStart: t.cannotStart === true,
    builders,
  };
  return createHash('sha256').update(JSON.stringify(inputs)).digest('hex');
}

async function buildIfStale(t: TestKctl, base: ComponentSet, kctlSha: string): Promise<void> {
  const name = relative(root, t.path);
  const components = t.kubernetes ? withKubernetesVersion(base, t.kubernetes) : base;
  const inputs = await inputsOf(t, components, base, kctlSha);
  const stamp = `${t.path}.inputs`;
  if (existsSync(t.path) && existsSync(stamp) && (await readFile(stamp, 'utf8')).trim() === inputs) {
    process.stdout.write(`${name}: kctl ${t.version} up to date\n`);
    return;
  }
  const started = Date.now();
  const what = [t.kubernetes && `Kubernetes ${t.kubernetes}`, t.cannotStart && 'cannot start']
    .filter(Boolean)
    .join(', ');
  process.stdout.write(`${name}: building kctl ${t.version}${what ? ` (${what})` : ''}\n`);
  await buildKctl({ out: t.path, version: t.version, components, reuse: base, cannotStart: t.cannotStart });
  await writeFile(stamp, `${inputs}\n`);
  process.stdout.write(`${name}: built in ${Math.round((Date.now() - started) / 1000)}s\n`);
}

async function main(): Promise<void> {
  if (!existsSync(mainKctl))
    throw new Error('dist/kctl is missing; run npm run build first (the test builds are made from the same code)');
  const base = loadManifest();
  const kctlSha = await sha256File(mainKctl);
  for (const t of TEST_KCTLS) await buildIfStale(t, base, kctlSha);
}

main().catch((err: unknown) => {
  process.stderr.write(`test builds: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
