// The images made on demand from this executable by `kctl airgap save-images` rather than
// carried (carrying them would add a second compressed copy of the runtime to every download).
// Each holds this executable's runtime (Node and kctl's code, unpacked from the payload and
// checked against its sha256), the C libraries Node loads at the paths the loader looks for
// them, and /tmp:
//   - the proxy-agent image: the runtime as /proxy-agent (the name selects the agent), run as
//     nobody like upstream's image;
//   - the kctl image, for control planes run as pods on a management cluster: the runtime as
//     /usr/local/bin/kctl (so `kubectl exec ... -- kctl status` works), and the whole executable
//     beside it for its component payload (KCTL_EXECUTABLE names it), the controller's components
//     staged in /var/lib/kctl/bin, run as root like a controller host's kctl, with its data under
//     /var/lib/kctl.
import { execa } from 'execa';
import { chmod, copyFile, lstat, mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { EXECUTABLE_ENV } from '../base/executable.ts';
import { buildImage, PATH_ENV, type OciImage } from './oci.ts';
import type { EmbeddedPayload } from './payload.ts';
import { KCTL_IMAGE, PROXY_AGENT_IMAGE } from './images.ts';
import { copyVerified, stageComponents } from './stage.ts';
import { stageId, turnCurrent } from './versions.ts';
import type { Logger } from '../base/log.ts';

/** Where the kctl image keeps the whole executable (its component payload). */
export const KCTL_IMAGE_EXECUTABLE = '/usr/local/lib/kctl/kctl';

/** The shared libraries `binary` loads (ldd), with the loader: what a dynamically linked program needs in an image. */
async function sharedLibraries(binary: string): Promise<string[]> {
  const { stdout } = await execa('ldd', [binary]);
  return stdout
    .split('\n')
    .map((l) => /(?:=>\s*)?(\/\S+)\s+\(0x/.exec(l)?.[1])
    .filter((p): p is string => p !== undefined);
}

/**
 * Fills an image root with the runtime at `program` (relative), the libraries it loads and /tmp;
 * `more` adds files of its own (relative paths, made by it). Returns every path to pack.
 */
async function populateRuntime(
  payload: EmbeddedPayload,
  root: string,
  program: string,
  more: (root: string) => Promise<string[]> = async () => [],
): Promise<string[]> {
  const runtime = payload.runtime;
  if (!runtime)
    throw new Error(
      `${payload.origin} carries no runtime to make an image from; run save-images with the built kctl (dist/kctl)`,
    );
  await mkdir(join(root, dirname(program)), { recursive: true });
  await copyVerified(payload, runtime, join(root, program), 0o755);
  await mkdir(join(root, 'tmp'));
  await chmod(join(root, 'tmp'), 0o1777);
  const files = [program, 'tmp', ...(await more(root))];
  for (const lib of await sharedLibraries(join(root, program))) {
    const rel = lib.slice(1);
    await mkdir(join(root, dirname(rel)), { recursive: true });
    await writeFile(join(root, rel), await readFile(lib));
    files.push(rel);
  }
  // The layer keeps each file's mode, and nobody must read what kctl's umask (0077) made private.
  const entries = new Set<string>();
  for (const f of files) {
    const parts = f.split('/');
    for (let i = 1; i < parts.length; i++) {
      const d = parts.slice(0, i).join('/');
      if (entries.has(d)) continue;
      entries.add(d);
      if (d !== 'tmp') await chmod(join(root, d), 0o755);
    }
    entries.add(f);
    if (f !== 'tmp') await chmod(join(root, f), 0o755);
  }
  // Directories sort before their contents.
  return [...entries].sort();
}

/** Writes the proxy-agent image of `payload`'s executable as an OCI tarball at `target`. */
export async function saveProxyAgentImage(payload: EmbeddedPayload, target: string): Promise<void> {
  const spec: OciImage = {
    name: PROXY_AGENT_IMAGE,
    config: { Entrypoint: ['/proxy-agent'], Env: [PATH_ENV], WorkingDir: '/', User: '65534:65534' },
    populate: (root) => populateRuntime(payload, root, 'proxy-agent'),
  };
  await buildImage(spec, target);
}

/**
 * The controller's components staged where a controller in the image stages them
 * (/var/lib/kctl/bin, `current` naming them), so every control-plane pod of one image runs the same
 * files of the image's layer and the kernel keeps one copy of their pages for all of them (a pod
 * that staged its own copy kept about 150 MiB of file pages that no other pod shared). At start
 * the controller checks them against the payload and finds them unchanged. Returns their paths.
 */
async function stageInImage(payload: EmbeddedPayload, root: string, log: Logger): Promise<string[]> {
  const binRoot = join(root, IMAGE_BIN_ROOT);
  const id = stageId(payload);
  await stageComponents(payload, join(binRoot, id), ['controller'], log);
  await turnCurrent(binRoot, id);
  // A recursive readdir also lists what lies behind the `current` link: the link alone is packed.
  const below: string[] = [];
  for (const f of await readdir(binRoot, { recursive: true })) {
    const parents = f.split('/').slice(0, -1);
    const behindLink = await Promise.all(
      parents.map(async (_, i) => (await lstat(join(binRoot, ...parents.slice(0, i + 1)))).isSymbolicLink()),
    );
    if (!behindLink.some(Boolean)) below.push(join(IMAGE_BIN_ROOT, f));
  }
  return [IMAGE_BIN_ROOT, ...below];
}

/** Where the image's controller components are staged: the default data dir's bin root. */
const IMAGE_BIN_ROOT = 'var/lib/kctl/bin';

/** Writes the kctl image of `payload`'s executable as an OCI tarball at `target`. */
export async function saveKctlImage(payload: EmbeddedPayload, target: string, log: Logger): Promise<void> {
  const spec: OciImage = {
    name: KCTL_IMAGE,
    config: {
      Entrypoint: ['/usr/local/bin/kctl'],
      Env: [PATH_ENV, `${EXECUTABLE_ENV}=${KCTL_IMAGE_EXECUTABLE}`],
      WorkingDir: '/',
    },
    // The executable is compressed already: a low zstd level packs the layer in seconds, not minutes.
    layerCodec: 'zstd',
    zstdLevel: 3,
    populate: (root) =>
      populateRuntime(payload, root, 'usr/local/bin/kctl', async (r) => {
        const exe = KCTL_IMAGE_EXECUTABLE.slice(1);
        await mkdir(join(r, dirname(exe)), { recursive: true });
        await copyFile(payload.origin, join(r, exe));
        // Node looks the user up (os.userInfo); a root without /etc/passwd has no name.
        await mkdir(join(r, 'etc'));
        await writeFile(join(r, 'etc', 'passwd'), 'root:x:0:0:root:/root:/sbin/nologin\n');
        await writeFile(join(r, 'etc', 'group'), 'root:x:0:\n');
        return [exe, 'etc/passwd', 'etc/group', ...(await stageInImage(payload, r, log))];
      }),
  };
  await buildImage(spec, target);
}
