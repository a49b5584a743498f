// The proxy-agent image, made on demand by `kctl airgap save-images` rather than carried: its
// program is this executable's runtime (Node and kctl's code, unpacked from the payload and
// checked against its sha256; the name /proxy-agent selects the agent), plus the C libraries
// Node loads, at the paths the loader looks for them, and /tmp. Carrying it would have added a
// second compressed copy of the runtime to every download. Runs as nobody, like upstream's image.
import { execa } from 'execa';
import { readFile, writeFile, mkdir, chmod } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { buildImage, PATH_ENV, type OciImage } from './oci.ts';
import type { EmbeddedPayload } from './payload.ts';
import { PROXY_AGENT_IMAGE } from './images.ts';
import { copyVerified } from './stage.ts';

/** The shared libraries `binary` loads (ldd), with the loader: what a dynamically linked program needs in an image. */
async function sharedLibraries(binary: string): Promise<string[]> {
  const { stdout } = await execa('ldd', [binary]);
  return stdout
    .split('\n')
    .map((l) => /(?:=>\s*)?(\/\S+)\s+\(0x/.exec(l)?.[1])
    .filter((p): p is string => p !== undefined);
}

/** Writes the proxy-agent image of `payload`'s executable as an OCI tarball at `target`. */
export async function saveProxyAgentImage(payload: EmbeddedPayload, target: string): Promise<void> {
  const runtime = payload.runtime;
  if (!runtime)
    throw new Error(
      `${payload.origin} carries no runtime to make ${PROXY_AGENT_IMAGE} from; run save-images with the built kctl (dist/kctl)`,
    );
  const spec: OciImage = {
    name: PROXY_AGENT_IMAGE,
    config: { Entrypoint: ['/proxy-agent'], Env: [PATH_ENV], WorkingDir: '/', User: '65534:65534' },
    async populate(root) {
      const program = join(root, 'proxy-agent');
      await copyVerified(payload, runtime, program, 0o755);
      const libs = await sharedLibraries(program);
      await mkdir(join(root, 'tmp'));
      await chmod(join(root, 'tmp'), 0o1777);
      const entries = new Set<string>(['proxy-agent', 'tmp']);
      // The layer keeps each file's mode, and nobody must read what kctl's umask (0077) made private.
      const dirs = new Set<string>();
      for (const lib of libs) {
        const rel = lib.slice(1);
        const parts = rel.split('/');
        for (let i = 1; i < parts.length; i++) dirs.add(parts.slice(0, i).join('/'));
        await mkdir(join(root, dirname(rel)), { recursive: true });
        await writeFile(join(root, rel), await readFile(lib));
        await chmod(join(root, rel), 0o755);
        entries.add(rel);
      }
      for (const d of dirs) {
        await chmod(join(root, d), 0o755);
        entries.add(d);
      }
      // Directories sort before their contents.
      return [...entries].sort();
    },
  };
  await buildImage(spec, target);
}
