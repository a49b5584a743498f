import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';

/** Write to a temp file in the same directory, then rename: readers never see half a file. */
export async function writeFileAtomic(path: string, data: string | Buffer, mode: number): Promise<void> {
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  // pid + counter: two kctl processes (or two calls) never share a temp file.
  const tmp = `${path}.${process.pid}.${++counter}.tmp`;
  try {
    await writeFile(tmp, data, { mode });
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}

let counter = 0;
