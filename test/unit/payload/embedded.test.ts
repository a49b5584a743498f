import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readdir, writeFile } from 'node:fs/promises';
import { zstdCompressSync } from 'node:zlib';
import { join } from 'node:path';
import { text } from 'node:stream/consumers';
import { test } from 'node:test';
import { encodeTrailer, readEmbeddedPayload, type PayloadIndex } from '../../../src/payload/payload.ts';
import { stageComponents } from '../../../src/payload/stage.ts';
import { quietLogger } from '../konnectivity/fixtures.ts';
import { tempDir } from '../../helpers.ts';

function withPayload(exe: Buffer, parts: Record<string, string>): Buffer {
  let offset = exe.length;
  const components = Object.entries(parts).map(([name, body]) => {
    const e = {
      name,
      version: 'v1',
      sha256: createHash('sha256').update(body).digest('hex'),
      size: body.length,
      path: name,
      roles: ['worker' as const],
      offset,
    };
    offset += body.length;
    return e;
  });
  const index = Buffer.from(
    JSON.stringify({ kctl: '1.2.3', platform: 'linux/amd64', components } satisfies PayloadIndex),
  );
  const trailer = encodeTrailer({ indexOffset: offset, indexLength: index.length });
  return Buffer.concat([exe, ...Object.values(parts).map((b) => Buffer.from(b)), index, trailer]);
}

test('reads components back from bytes appended to an executable', async (t) => {
  const dir = await tempDir(t);
  const file = join(dir, 'kctl');
  await writeFile(
    file,
    withPayload(Buffer.from('\x7fELF fake executable'), { runc: 'runc-bytes', containerd: 'containerd-bytes' }),
  );
  const p = await readEmbeddedPayload(file);
  assert.ok(p);
  assert.equal(p.index.kctl, '1.2.3');
  assert.equal(await text(p.open(p.index.components[1]!)), 'containerd-bytes');
  assert.equal(await text(p.open(p.index.components[0]!)), 'runc-bytes');
});

test('a file without a trailer has no payload; a damaged trailer is a clear error', async (t) => {
  const dir = await tempDir(t);
  const plain = join(dir, 'plain');
  await writeFile(plain, Buffer.alloc(100, 1));
  assert.equal(await readEmbeddedPayload(plain), null);
  const damaged = join(dir, 'damaged');
  const good = withPayload(Buffer.from('exe'), { a: 'x' });
  await writeFile(damaged, Buffer.concat([Buffer.from('junk'), good]));
  await assert.rejects(readEmbeddedPayload(damaged), /payload trailer is inconsistent/);
});

test('the runtime the launcher unpacks is described by the trailer and reads back as its own bytes', async (t) => {
  const dir = await tempDir(t);
  const launcher = Buffer.from('\x7fELF fake launcher');
  const runtime = Buffer.from('node runtime bytes '.repeat(1000));
  const packed = zstdCompressSync(runtime);
  const index = Buffer.from(
    JSON.stringify({ kctl: '1.2.3', platform: 'linux/amd64', components: [] } satisfies PayloadIndex),
  );
  const sha256 = createHash('sha256').update(runtime).digest('hex');
  const described = { offset: launcher.length, stored: packed.length, size: runtime.length, sha256 };
  const file = join(dir, 'kctl');
  const trailer = encodeTrailer({
    indexOffset: launcher.length + packed.length,
    indexLength: index.length,
    runtime: described,
  });
  await writeFile(file, Buffer.concat([launcher, packed, index, trailer]));
  const p = (await readEmbeddedPayload(file))!;
  assert.deepEqual(
    { offset: p.runtime?.offset, stored: p.runtime?.stored?.size, size: p.runtime?.size, sha256: p.runtime?.sha256 },
    described,
  );
  assert.equal(await text(p.open(p.runtime!)), runtime.toString());

  // A runtime said to run into the index is a damaged executable.
  const overlapping = encodeTrailer({
    indexOffset: launcher.length + packed.length,
    indexLength: index.length,
    runtime: { ...described, stored: packed.length + 1 },
  });
  await writeFile(file, Buffer.concat([launcher, packed, index, overlapping]));
  await assert.rejects(readEmbeddedPayload(file), /payload trailer is inconsistent/);
});

test('a compressed component reads back as its own bytes; damaged compressed bytes stage nothing and say so in one line', async (t) => {
  const dir = await tempDir(t);
  const body = Buffer.from('kubelet-bytes '.repeat(5000));
  const packed = zstdCompressSync(body);
  const exe = Buffer.from('\x7fELF fake executable');
  const entry = {
    name: 'kubelet',
    version: 'v1',
    sha256: createHash('sha256').update(body).digest('hex'),
    size: body.length,
    path: 'kubelet',
    roles: ['worker' as const],
    offset: exe.length,
    stored: { codec: 'zstd' as const, size: packed.length },
  };
  const write = async (file: string, stored: Buffer) => {
    const index = Buffer.from(
      JSON.stringify({ kctl: '1.2.3', platform: 'linux/amd64', components: [entry] } satisfies PayloadIndex),
    );
    const trailer = encodeTrailer({ indexOffset: exe.length + stored.length, indexLength: index.length });
    await writeFile(file, Buffer.concat([exe, stored, index, trailer]));
  };
  const good = join(dir, 'good');
  await write(good, packed);
  const p = (await readEmbeddedPayload(good))!;
  assert.ok(packed.length < body.length / 10);
  assert.equal(await text(p.open(p.index.components[0]!)), body.toString());
  const staged = await stageComponents(p, join(dir, 'bin-good'), ['worker'], quietLogger());
  assert.deepEqual(staged.staged, ['kubelet']);

  const damaged = Buffer.from(packed);
  damaged[Math.floor(damaged.length / 2)]! ^= 0xff;
  const bad = join(dir, 'bad');
  await write(bad, damaged);
  const binDir = join(dir, 'bin-bad');
  await assert.rejects(
    stageComponents((await readEmbeddedPayload(bad))!, binDir, ['worker'], quietLogger()),
    (err: Error) => {
      assert.match(
        err.message,
        /^payload component kubelet is corrupt \(.*\); nothing was staged, reinstall or rebuild kctl$/,
      );
      assert.equal(err.message.split('\n').length, 1);
      return true;
    },
  );
  assert.deepEqual(
    (await readdir(binDir)).filter((f) => !f.startsWith('.stage.lock')),
    [],
    'nothing half-staged',
  );
});
