// The launcher's SHA-256 (assets/launcher/sha256.c), both the SHA-NI and the portable path,
// against Node's, over lengths around the block and padding boundaries, fed in odd-sized chunks.
import assert from 'node:assert/strict';
import { execa } from 'execa';
import { createHash, randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { tempDir } from '../../helpers.ts';

const src = new URL('../../../assets/launcher/', import.meta.url).pathname;

const HARNESS = `
#include "sha256.h"
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  size_t step = argc > 1 ? (size_t)atoi(argv[1]) : 1;
  static unsigned char buf[1 << 20];
  struct sha256 h;
  sha256_init(&h);
  size_t n;
  while ((n = fread(buf, 1, step, stdin)) > 0) sha256_update(&h, buf, n);
  unsigned char out[32];
  sha256_final(&h, out);
  for (int i = 0; i < 32; i++) printf("%02x", out[i]);
  return 0;
}
`;

test('the launcher hashes as SHA-256 does, with and without the CPU extensions, whatever the chunking', async (t) => {
  const dir = await tempDir(t);
  await writeFile(join(dir, 'main.c'), HARNESS);
  const builds = { cpu: join(dir, 'sha-cpu'), portable: join(dir, 'sha-portable') };
  await execa('gcc', [
    '-O2',
    '-Wall',
    '-Werror',
    '-I',
    src,
    '-o',
    builds.cpu,
    join(dir, 'main.c'),
    join(src, 'sha256.c'),
  ]);
  await execa('gcc', [
    '-O2',
    '-Wall',
    '-Werror',
    '-DSHA256_SOFTWARE_ONLY=1',
    '-I',
    src,
    '-o',
    builds.portable,
    join(dir, 'main.c'),
    join(src, 'sha256.c'),
  ]);
  for (const length of [0, 1, 3, 55, 56, 63, 64, 65, 119, 120, 128, 1000, 100_003, 1_048_576 + 17]) {
    const input = randomBytes(length);
    const want = createHash('sha256').update(input).digest('hex');
    for (const [name, bin] of Object.entries(builds)) {
      for (const step of [1, 63, 64, 4099, 1 << 20]) {
        if (step === 1 && length > 100_003) continue;
        const { stdout } = await execa(bin, [String(step)], { input, encoding: 'utf8' });
        assert.equal(stdout, want, `${name}: ${length} bytes in chunks of ${step}`);
      }
    }
  }
});
