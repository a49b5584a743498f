// A read-only container registry for the conformance lab: the images the suite runs, served under
// their own names (registry.k8s.io/..., docker.io/...) over the registry API, so that a spec whose
// pod says `imagePullPolicy: Always` (the image volume specs) pulls as it would from the real
// registry, in the air gap. Workers reach it as a mirror of those registries (containerd's
// hosts.toml, written into kctl's containerd drop-in folder: `mirrorConfig`). Only what a pull
// uses: GET /v2/, and HEAD/GET of manifests (by tag or digest) and blobs.
//
//   node --import tsx test/conformance/registry.ts PORT DIR TARBALL...   (in a lab host; DIR is scratch)
import { createReadStream } from 'node:fs';
import { mkdir, readFile, stat } from 'node:fs/promises';
import { createServer, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { extract } from 'tar';

interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
}

/** containerd's hosts.toml for `registry`, sending its pulls to `mirror` (http://IP:PORT) first. */
export function hostsToml(registry: string, mirror: string): string {
  const server = registry === 'docker.io' ? 'https://registry-1.docker.io' : `https://${registry}`;
  return `server = "${server}"\n\n[host."${mirror}"]\n  capabilities = ["pull", "resolve"]\n`;
}

/** A containerd drop-in (kctl's <data-dir>/containerd.d/) that reads registry hosts from `hostsDir`. */
export function mirrorConfig(hostsDir: string): string {
  return `version = 4\n\n[plugins.'io.containerd.cri.v1.images'.registry]\n  config_path = '${hostsDir}'\n`;
}

/** The registries the suite's images and kctl's own name: the lab's registry stands in for both. */
export const MIRRORED_REGISTRIES = ['registry.k8s.io', 'docker.io'];

async function serve(port: number, dir: string, tarballs: string[]): Promise<void> {
  const blobs = join(dir, 'blobs', 'sha256');
  await mkdir(blobs, { recursive: true });
  /** `registry.k8s.io/e2e-test-images/kitten:1.8` → its manifest's descriptor. */
  const tags = new Map<string, Descriptor>();
  const manifests = new Map<string, Descriptor>();
  for (const [i, tarball] of tarballs.entries()) {
    // Blobs are named by digest: every image's land in one folder, shared ones once.
    await extract({ file: tarball, cwd: dir, filter: (p) => p.startsWith('blobs/') });
    const own = join(dir, 'index', String(i));
    await mkdir(own, { recursive: true });
    await extract({ file: tarball, cwd: own, filter: (p) => p === 'index.json' });
    const index = JSON.parse(await readFile(join(own, 'index.json'), 'utf8')) as { manifests: Descriptor[] };
    for (const m of index.manifests) {
      const name = m.annotations?.['io.containerd.image.name'];
      if (name) tags.set(name, m);
      manifests.set(m.digest, m);
    }
  }
  const send = async (res: ServerResponse, head: boolean, digest: string, type: string): Promise<void> => {
    const file = join(blobs, digest.slice('sha256:'.length));
    const size = (await stat(file)).size;
    res.writeHead(200, { 'content-type': type, 'content-length': size, 'docker-content-digest': digest });
    if (head) res.end();
    else createReadStream(file).pipe(res);
  };
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://registry');
    const head = req.method === 'HEAD';
    const notFound = (code: string) => {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(head ? undefined : JSON.stringify({ errors: [{ code, message: url.pathname }] }));
    };
    res.setHeader('docker-distribution-api-version', 'registry/2.0');
    if (req.method !== 'GET' && !head) {
      res.writeHead(405).end();
      return;
    }
    if (url.pathname === '/v2/' || url.pathname === '/v2') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(head ? undefined : '{}');
      return;
    }
    // containerd names the registry it mirrors in ?ns=; a plain client asks for docker.io's names.
    const ns = url.searchParams.get('ns') ?? 'docker.io';
    const m = /^\/v2\/(?<repo>.+)\/(?<kind>manifests|blobs)\/(?<ref>[^/]+)$/.exec(url.pathname)?.groups;
    if (!m?.repo || !m.kind || !m.ref) return notFound('NAME_UNKNOWN');
    const { repo, kind, ref } = m;
    const found =
      kind === 'blobs'
        ? /^sha256:[0-9a-f]{64}$/.test(ref) && { digest: ref, mediaType: 'application/octet-stream' }
        : ref.startsWith('sha256:')
          ? manifests.get(ref)
          : tags.get(`${ns}/${repo}:${ref}`);
    if (!found) return notFound(kind === 'blobs' ? 'BLOB_UNKNOWN' : 'MANIFEST_UNKNOWN');
    send(res, head, found.digest, found.mediaType).catch(() => notFound('BLOB_UNKNOWN'));
  });
  await new Promise<void>((r) => server.listen(port, r));
  process.stdout.write(`registry ready: ${tags.size} images on port ${port}\n`);
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop()!)) {
  const [port, dir, ...tarballs] = process.argv.slice(2);
  serve(Number(port), dir!, tarballs).catch((err: unknown) => {
    process.stderr.write(`registry: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
