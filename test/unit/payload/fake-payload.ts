// A payload of small files in a directory, for staging tests.
import { createHash } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { LockEntry, Role } from '../../../src/payload/manifest.ts';
import { DirectoryPayload, type PayloadIndex } from '../../../src/payload/payload.ts';

const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

export async function fakePayload(
  dir: string,
  files: { name: string; body: string; roles: Role[]; path?: string }[],
  kctl = '0.0.0-test',
): Promise<DirectoryPayload> {
  const components: LockEntry[] = [];
  for (const f of files) {
    const path = f.path ?? f.name;
    await mkdir(join(dir, path, '..'), { recursive: true });
    await writeFile(join(dir, path), f.body);
    components.push({
      name: f.name,
      version: 'v1.0.0',
      sha256: sha(f.body),
      size: Buffer.byteLength(f.body),
      path,
      roles: f.roles,
    });
  }
  const index: PayloadIndex = { kctl, platform: 'linux/amd64', components };
  return new DirectoryPayload(dir, index);
}
