// `npm run components -- --download`: the official release artifacts, each checked against
// the sha256 pinned in assets/components.json before anything is written to the cache.
import { createHash } from 'node:crypto';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as tar from 'tar';
import { componentRelPath, type ComponentPin, type LockEntry, type Manifest } from '../src/payload/manifest.ts';

async function fetchArtifact(url: string): Promise<Buffer> {
  let res: Response;
  try {
    res = await fetch(url, { signal: AbortSignal.timeout(15_000) });
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).message;
    throw new Error(
      `cannot download ${url} (${cause}); release downloads need internet, build from Go modules instead with: npm run components`,
      {
        cause: err,
      },
    );
  }
  if (!res.ok)
    throw new Error(`download ${url} answered HTTP ${res.status}; check the URL pinned in assets/components.json`);
  return Buffer.from(await res.arrayBuffer());
}

/** For binaries whose checksum no pin list carries: the `.sha256` file published beside them. */
async function publishedSha256(url: string): Promise<string> {
  const text = (await fetchArtifact(url)).toString('utf8').trim();
  const hex = text.split(/\s+/)[0] ?? '';
  if (!/^[0-9a-f]{64}$/.test(hex)) throw new Error(`${url} does not hold a sha256; cannot verify that download`);
  process.stdout.write(`no pinned sha256; verifying against the published ${url}\n`);
  return hex;
}

async function extractMember(archive: Buffer, member: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let found = false;
  const parser = new tar.Parser({
    filter: (p) => p === member,
    onReadEntry: (entry) => {
      found = true;
      entry.on('data', (c: Buffer) => chunks.push(c));
    },
  });
  await pipeline(Readable.from([archive]), parser);
  if (!found) throw new Error(`archive has no member ${member}; check assets/components.json`);
  return Buffer.concat(chunks);
}

export async function downloadComponents(
  manifest: Manifest,
  binDir: string,
  entry: (c: ComponentPin, path: string) => Promise<LockEntry>,
  checkVersion: (c: ComponentPin, path: string) => Promise<void>,
): Promise<LockEntry[]> {
  const shipped = manifest.components.filter((c) => c.download);
  const unpinned = shipped.filter((c) => !c.download!.sha256 && !c.download!.sha256Url).map((c) => c.name);
  if (unpinned.length)
    throw new Error(
      `no official sha256 pinned for ${unpinned.join(', ')}; add it to assets/components.json or build from Go modules with: npm run components`,
    );
  const artifacts = new Map<string, Buffer>();
  const out: LockEntry[] = [];
  for (const c of shipped) {
    const d = c.download!;
    let artifact = artifacts.get(d.url);
    if (!artifact) {
      process.stdout.write(`downloading ${d.url}\n`);
      artifact = await fetchArtifact(d.url);
      const want = d.sha256 ?? (await publishedSha256(d.sha256Url!));
      const got = createHash('sha256').update(artifact).digest('hex');
      if (got !== want) throw new Error(`${d.url}: sha256 ${got} does not match the expected ${want}; refusing it`);
      artifacts.set(d.url, artifact);
    }
    const bytes = d.member ? await extractMember(artifact, d.member) : artifact;
    const path = join(binDir, componentRelPath(c));
    await mkdir(dirname(path), { recursive: true });
    await writeFile(`${path}.tmp`, bytes, { mode: 0o755 });
    await rename(`${path}.tmp`, path);
    await checkVersion(c, path);
    out.push(await entry(c, path));
  }
  return out;
}
