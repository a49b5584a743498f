import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { chmod, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import {
  BackupCipherError,
  cipherStream,
  createBackupKey,
  Opener,
  readBackupKey,
  Sealer,
} from '../../../../src/controller/backups/backup-cipher.ts';
import { tempDir } from '../../../helpers.ts';

/** Seals `plain`, pushed in pieces of `piece` bytes. */
function seal(key: Buffer, plain: Buffer, chunkSize: number, piece = 7): Buffer {
  const s = new Sealer(key, chunkSize);
  const out: Buffer[] = [];
  for (let i = 0; i < plain.length; i += piece) out.push(...s.push(plain.subarray(i, i + piece)));
  out.push(...s.end());
  return Buffer.concat(out);
}

function open(key: Buffer, sealed: Buffer, piece = 5): Buffer {
  const o = new Opener(key);
  const out: Buffer[] = [];
  for (let i = 0; i < sealed.length; i += piece) out.push(...o.push(sealed.subarray(i, i + piece)));
  out.push(...o.end());
  return Buffer.concat(out);
}

const failure = (fn: () => unknown): string => {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof BackupCipherError, String(err));
    return err.kind;
  }
  return 'opened';
};

test('round trip for every length around the chunk size, pushed in any piece size', () => {
  const key = randomBytes(32);
  for (const length of [0, 1, 15, 16, 17, 31, 32, 33, 64, 100]) {
    const plain = randomBytes(length);
    const sealed = seal(key, plain, 16, 1 + (length % 9));
    assert.equal(sealed.length, 68 + Math.max(1, Math.ceil(length / 16)) * 16 + length, `sealed size for ${length}`);
    assert.deepEqual(open(key, sealed, 1 + (length % 4)), plain, `length ${length}`);
  }
  // The default chunk size through the stream wrapper, several chunks.
  const plain = randomBytes(200_000);
  assert.deepEqual(open(key, seal(key, plain, 65536, 10_000), 4096), plain);
});

test('two archives of the same bytes under the same key differ (fresh salt and nonces)', () => {
  const key = randomBytes(32);
  const plain = Buffer.from('same');
  assert.notDeepEqual(seal(key, plain, 16), seal(key, plain, 16));
});

test('a change to any byte is refused: header bytes as a wrong key or damage, chunk bytes as damage', () => {
  const key = randomBytes(32);
  const plain = randomBytes(50);
  const sealed = seal(key, plain, 16);
  for (let i = 0; i < sealed.length; i++) {
    const bad = Buffer.from(sealed);
    bad[i]! ^= 0x01;
    const kind = failure(() => open(key, bad));
    if (i < 8) assert.equal(kind, 'not-encrypted', `byte ${i}`);
    else if (i === 8) assert.equal(kind, 'unsupported', `byte ${i}`);
    else if (i >= 13 && i < 45) assert.equal(kind, 'wrong-key', `salt byte ${i}`);
    else if (i >= 52 && i < 68) assert.equal(kind, 'wrong-key', `key check byte ${i}`);
    else assert.equal(kind, 'damaged', `byte ${i}`);
  }
});

test('cut off at any length, extended, or chunks reordered: refused', () => {
  const key = randomBytes(32);
  const sealed = seal(key, randomBytes(40), 16);
  for (let n = 0; n < sealed.length; n++)
    assert.notEqual(
      failure(() => open(key, sealed.subarray(0, n))),
      'opened',
      `cut at ${n}`,
    );
  assert.equal(
    failure(() => open(key, Buffer.concat([sealed, Buffer.from([0])]))),
    'damaged',
  );
  // Chunks 0 and 1 (32 bytes each after the 68-byte header) swapped.
  const swapped = Buffer.concat([
    sealed.subarray(0, 68),
    sealed.subarray(100, 132),
    sealed.subarray(68, 100),
    sealed.subarray(132),
  ]);
  assert.equal(
    failure(() => open(key, swapped)),
    'damaged',
  );
  // The last chunk dropped: the one before it is not flagged last.
  assert.equal(
    failure(() => open(key, sealed.subarray(0, 132))),
    'damaged',
  );
});

test('a wrong key is told apart from damage; a plain file is not encrypted', () => {
  const sealed = seal(randomBytes(32), randomBytes(40), 16);
  assert.equal(
    failure(() => open(randomBytes(32), sealed)),
    'wrong-key',
  );
  assert.equal(
    failure(() =>
      open(randomBytes(32), Buffer.from('\x1f\x8b gzip data that is long enough to pass the header size..........')),
    ),
    'not-encrypted',
  );
});

test('the stream wrapper seals and opens; a damaged stream errors', async () => {
  const key = randomBytes(32);
  const plain = randomBytes(300_000);
  const collect = async (r: NodeJS.ReadableStream) => {
    const out: Buffer[] = [];
    for await (const c of r) out.push(c as Buffer);
    return Buffer.concat(out);
  };
  const sealed = await collect(
    Readable.from([plain.subarray(0, 1000), plain.subarray(1000)]).pipe(cipherStream(new Sealer(key))),
  );
  assert.deepEqual(await collect(Readable.from([sealed]).pipe(cipherStream(new Opener(key)))), plain);
  sealed[150_000]! ^= 0x80;
  await assert.rejects(
    collect(Readable.from([sealed]).pipe(cipherStream(new Opener(key)))),
    /chunk 2 does not authenticate/,
  );
});

test('key files: made 0600 and never replaced; missing, open to others or not a key: one line each', async (t) => {
  const dir = await tempDir(t, 'kctl-key-');
  const file = join(dir, 'backup.key');
  await createBackupKey(file);
  assert.equal((await readBackupKey(file)).length, 32);
  assert.match(await readFile(file, 'utf8'), /^[A-Za-z0-9+/]{43}=\n$/);
  await assert.rejects(createBackupKey(file), /exists; a key is never replaced/);
  await assert.rejects(
    readBackupKey(join(dir, 'missing')),
    /^Error: encryption key file .*missing cannot be read \(ENOENT\); a backup key is 32 random bytes/,
  );
  await chmod(file, 0o644);
  await assert.rejects(readBackupKey(file), /is open to others \(mode 0644\); chmod 600 /);
  for (const text of ['short\n', randomBytes(16).toString('base64'), randomBytes(32).toString('hex'), '']) {
    const bad = join(dir, 'bad.key');
    await writeFile(bad, text, { mode: 0o600 });
    await chmod(bad, 0o600);
    await assert.rejects(
      readBackupKey(bad),
      /does not hold a backup key; .*kctl backup key create FILE/,
      JSON.stringify(text),
    );
  }
});
