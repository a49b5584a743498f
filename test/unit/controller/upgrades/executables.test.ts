// Controllers serve kctl executables to the cluster's own hosts (node or admin client
// certificates of the cluster CA, nobody else), and a download that breaks off goes on from
// where it stopped, at the same or the next controller, until the file is the plan's.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { createServer, request, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { ExecutableFiles, parseRange } from '../../../../src/controller/upgrades/executables.ts';
import { keptExecutable } from '../../../../src/payload/upgrade-files.ts';
import { downloadExecutable } from '../../../../src/payload/download.ts';
import { tempDir } from '../../../helpers.ts';
import { makePki, quietLogger } from '../../konnectivity/fixtures.ts';

const VERSION = '0.2.0';
const SIZE = 3 * 1024 * 1024 + 17;

/** A controller's executables endpoint on loopback, with `cut` deciding how many bytes a response may send before its connection is cut. */
async function served(t: TestContext, cut: (n: number) => number | undefined = () => undefined) {
  const pki = await makePki();
  const dataDir = await tempDir(t, 'kctl-exec-');
  const content = randomBytes(SIZE);
  await mkdir(join(dataDir, 'upgrade'));
  await writeFile(keptExecutable(dataDir, VERSION), content);
  const files = new ExecutableFiles(dataDir);
  const ranges: (string | undefined)[] = [];
  const { serverCert: cert, serverKey: key, ca } = pki;
  const server: Server = createServer({ cert, key, ca, requestCert: true, rejectUnauthorized: false }, (req, res) => {
    ranges.push(req.headers.range);
    const limit = cut(ranges.length);
    if (limit !== undefined) {
      let sent = 0;
      const write = res.write.bind(res);
      res.write = ((chunk: Buffer, ...rest: never[]) => {
        sent += chunk.length;
        if (sent > limit) {
          res.destroy();
          return false;
        }
        return write(chunk, ...rest);
      }) as typeof res.write;
    }
    void files.handle(req, res, quietLogger());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  server.unref();
  const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}/v1/executables/${VERSION}`;
  return { pki, url, content, sha256: createHash('sha256').update(content).digest('hex'), ranges, dataDir };
}

/** One GET with node:https (fetch cannot present a client certificate). */
function get(url: string, tls: { ca: string; cert?: string; key?: string }, headers: Record<string, string> = {}) {
  return new Promise<{ status: number; body: Buffer; headers: Record<string, unknown> }>((resolve, reject) => {
    const req = request(url, { ...tls, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks), headers: res.headers }));
    });
    req.on('error', reject);
    req.end();
  });
}

test('a node certificate gets the file, whole or one range; strangers, foreign CAs and other groups get nothing', async (t) => {
  const s = await served(t);
  const ca = s.pki.ca;
  const node = await s.pki.nodeCert('w1');
  const whole = await get(s.url, { ca, ...node });
  assert.equal(whole.status, 200);
  assert.ok(whole.body.equals(s.content));
  const part = await get(s.url, { ca, ...node }, { range: 'bytes=1000-' });
  assert.equal(part.status, 206);
  assert.equal(part.headers['content-range'], `bytes 1000-${SIZE - 1}/${SIZE}`);
  assert.ok(part.body.equals(s.content.subarray(1000)));
  assert.equal((await get(s.url, { ca, ...node }, { range: `bytes=${SIZE}-` })).status, 416);
  assert.equal((await get(s.url.replace(VERSION, '9.9.9'), { ca, ...node })).status, 404);
  assert.equal((await get(s.url.replace(VERSION, '..%2F..%2Fetc'), { ca, ...node })).status, 400);
  // No client certificate, one of a foreign CA, one of the cluster CA outside the allowed groups.
  assert.equal((await get(s.url, { ca })).status, 401);
  const foreign = await s.pki.clientCert({
    commonName: 'system:node:w1',
    organizations: ['system:nodes'],
    signer: await s.pki.foreignCa(),
  });
  assert.equal((await get(s.url, { ca, ...foreign })).status, 401);
  const user = await s.pki.clientCert({ commonName: 'jane', organizations: ['developers'] });
  const refused = await get(s.url, { ca, ...user });
  assert.equal(refused.status, 403);
  assert.match(refused.body.toString(), /only system:nodes and system:masters may fetch kctl executables/);
  const admin = await s.pki.clientCert({ commonName: 'kctl-admin', organizations: ['system:masters'] });
  assert.equal((await get(s.url, { ca, ...admin })).status, 200);
});

test('ranges: open-ended and closed ones are served, anything else is refused', () => {
  assert.equal(parseRange(undefined, 10), null);
  assert.deepEqual(parseRange('bytes=3-', 10), { start: 3, end: 9 });
  assert.deepEqual(parseRange('bytes=3-5', 10), { start: 3, end: 5 });
  assert.deepEqual(parseRange('bytes=3-50', 10), { start: 3, end: 9 });
  for (const bad of ['bytes=10-', 'bytes=5-3', 'bytes=-5', 'bytes=1-2,4-5', 'items=1-'])
    assert.equal(parseRange(bad, 10), 'bad', bad);
});

test('a download cut off twice goes on from where it stopped, and ends with the plan file', async (t) => {
  // The first two responses break off after about a third of the file each.
  const s = await served(t, (n) => (n <= 2 ? Math.floor(SIZE / 3) : undefined));
  const target = join(s.dataDir, 'kctl-new');
  const node = await s.pki.nodeCert('w1');
  const ca = s.pki.ca;
  const errors: string[] = [];
  const r = await downloadExecutable({
    sources: () => [{ url: s.url }],
    target,
    sha256: s.sha256,
    size: SIZE,
    tls: async () => ({ ca, ...node }),
    retryMs: 10,
    onError: (_url, reason) => errors.push(reason),
  });
  assert.equal(r.resumed, 2);
  assert.ok(r.received < SIZE * 1.2, `${r.received} bytes received for a ${SIZE}-byte file`);
  assert.equal(s.ranges[0], undefined);
  assert.match(s.ranges[1]!, /^bytes=\d+-$/);
  assert.equal(Number(/\d+/.exec(s.ranges[2]!)![0]) > Number(/\d+/.exec(s.ranges[1]!)![0]), true);
  assert.ok((await readFile(target)).equals(s.content));
  assert.equal((await stat(target)).mode & 0o777, 0o755);
  assert.equal(errors.length, 2);
  // Asked again: the file is there, nothing is fetched.
  const before = s.ranges.length;
  assert.deepEqual(
    await downloadExecutable({
      sources: () => [{ url: s.url }],
      target,
      sha256: s.sha256,
      size: SIZE,
      tls: async () => ({ ca, ...node }),
    }),
    {
      resumed: 0,
      received: 0,
    },
  );
  assert.equal(s.ranges.length, before);
});

test('a controller that is down is skipped for the next, and a file that is not the plan is never put in place', async (t) => {
  const s = await served(t);
  const node = await s.pki.nodeCert('w1');
  const ca = s.pki.ca;
  const target = join(s.dataDir, 'kctl-new');
  const down = 'https://127.0.0.1:1/v1/executables/0.2.0';
  await downloadExecutable({
    sources: () => [{ url: down }, { url: s.url }],
    target,
    sha256: s.sha256,
    size: SIZE,
    tls: async () => ({ ca, ...node }),
    retryMs: 10,
  });
  assert.ok((await readFile(target)).equals(s.content));
  const other = join(s.dataDir, 'kctl-other');
  await assert.rejects(
    downloadExecutable({
      sources: () => [{ url: s.url }],
      target: other,
      sha256: 'b'.repeat(64),
      size: SIZE,
      tls: async () => ({ ca, ...node }),
      retryMs: 10,
      rounds: 2,
    }),
    /after 2 rounds over every controller \(last: .*the file's sha256 is not the plan's\)/,
  );
  await assert.rejects(stat(other), /ENOENT/);
  await assert.rejects(stat(`${other}.part`), /ENOENT/);
});

test('a client that reads nothing is cut off after the idle bound', async (t) => {
  const pki = await makePki();
  const dataDir = await tempDir(t, 'kctl-exec-');
  await mkdir(join(dataDir, 'upgrade'));
  // Bigger than what the loopback socket buffers hold, so the server has bytes left to send.
  await writeFile(keptExecutable(dataDir, VERSION), randomBytes(64 * 1024 * 1024));
  const files = new ExecutableFiles(dataDir, 500);
  const { serverCert: cert, serverKey: key, ca } = pki;
  let served!: (finished: boolean) => void;
  const ended = new Promise<boolean>((resolve) => (served = resolve));
  const server: Server = createServer({ cert, key, ca, requestCert: true, rejectUnauthorized: false }, (req, res) => {
    res.on('close', () => served(res.writableFinished));
    void files.handle(req, res, quietLogger());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}/v1/executables/${VERSION}`;
  const node = await pki.nodeCert('w1');
  const req = request(url, { ca, ...node }, (res) => res.pause()); // a client that stops reading
  req.on('error', () => undefined);
  req.end();
  assert.equal(await ended, false, 'the server sent it all to a client that read nothing');
  req.destroy();
});

/** An executables endpoint on loopback serving `bytes` random bytes, with the given limits. */
async function limited(t: TestContext, bytes: number, limits: ConstructorParameters<typeof ExecutableFiles>[2]) {
  const pki = await makePki();
  const dataDir = await tempDir(t, 'kctl-exec-');
  await mkdir(join(dataDir, 'upgrade'));
  await writeFile(keptExecutable(dataDir, VERSION), randomBytes(bytes));
  const files = new ExecutableFiles(dataDir, 60_000, limits);
  const closed: boolean[] = [];
  const { serverCert: cert, serverKey: key, ca } = pki;
  const server: Server = createServer({ cert, key, ca, requestCert: true, rejectUnauthorized: false }, (req, res) => {
    res.on('close', () => closed.push(res.writableFinished));
    void files.handle(req, res, quietLogger());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  server.unref();
  const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}/v1/executables/${VERSION}`;
  /** A download that stops reading after its first bytes: it stays in progress on the server. */
  const stalled = (tls: { ca: string; cert: string; key: string }) =>
    new Promise<() => void>((resolve) => {
      const req = request(url, tls, (res) => res.once('data', () => (res.pause(), resolve(() => req.destroy()))));
      req.on('error', () => undefined);
      req.end();
    });
  return { pki, url, ca, closed, stalled };
}

test('one download per client: a new request replaces the one in progress; a controller serves a bounded number at once', async (t) => {
  const s = await limited(t, 64 * 1024 * 1024, { maxDownloads: 2 });
  const w1 = { ca: s.ca, ...(await s.pki.nodeCert('w1')) };
  const w2 = { ca: s.ca, ...(await s.pki.nodeCert('w2')) };
  const w3 = { ca: s.ca, ...(await s.pki.nodeCert('w3')) };
  const first = await s.stalled(w1);
  t.after(first);
  const again = await s.stalled(w1); // the same node again (a resume, or a leaked certificate)
  t.after(again);
  await waitUntil(() => s.closed.length === 1);
  assert.deepEqual(s.closed, [false], 'the earlier download of w1 was cut when its next began');
  const other = await s.stalled(w2);
  t.after(other);
  const busy = await get(s.url, w3);
  assert.equal(busy.status, 429);
  assert.equal(busy.headers['retry-after'], '15');
  assert.match(busy.body.toString(), /serves 2 downloads already; retry in 15 s or at another controller/);
  other();
  await waitUntil(() => s.closed.length === 3);
  assert.equal((await get(s.url, w3, { range: 'bytes=0-99' })).status, 206, 'a place came free');
  first();
  again();
});

test("a client fetches at most the hour's budget of bytes; other clients and the next hour are not held back", async (t) => {
  let now = 1_000_000;
  const s = await limited(t, 1024 * 1024, { filesPerHour: 2, now: () => now });
  const w1 = { ca: s.ca, ...(await s.pki.nodeCert('w1')) };
  const w2 = { ca: s.ca, ...(await s.pki.nodeCert('w2')) };
  for (let i = 0; i < 2; i++) assert.equal((await get(s.url, w1)).status, 200, `download ${i}`);
  now += 60_000;
  const refused = await get(s.url, w1, { range: 'bytes=1000-' });
  assert.equal(refused.status, 429);
  assert.equal(refused.headers['retry-after'], String(3600 - 60));
  assert.match(
    refused.body.toString(),
    /system:node:w1 fetched 2 files' worth of kctl executables in the last hour; retry in 3540 s/,
  );
  assert.equal((await get(s.url, w2)).status, 200, 'another node is not held back');
  // The controllers' shared admin certificate counts towards nothing but the cap.
  const admin = {
    ca: s.ca,
    ...(await s.pki.clientCert({ commonName: 'kctl-admin', organizations: ['system:masters'] })),
  };
  for (let i = 0; i < 3; i++) assert.equal((await get(s.url, admin)).status, 200, `admin download ${i}`);
  now += 3_540_000;
  assert.equal((await get(s.url, w1)).status, 200, 'a new hour');
});

async function waitUntil(check: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !check(); i++) await new Promise((r) => setTimeout(r, 25));
  assert.ok(check(), 'timed out');
}

test('a download sends the server name its source names (a front door routes by it) and checks the certificate for that name', async (t) => {
  const s = await served(t);
  const node = await s.pki.nodeCert('w1');
  const errors: string[] = [];
  const download = (name: string, target: string) =>
    downloadExecutable({
      sources: () => [{ url: s.url, serverName: name }],
      target: join(s.dataDir, target),
      sha256: s.sha256,
      size: SIZE,
      tls: async () => ({ ca: s.pki.ca, ...node }),
      retryMs: 10,
      rounds: 1,
      onError: (_url, reason) => errors.push(reason),
    });
  // The server's certificate names localhost (and 127.0.0.1, which the URL has): the name decides.
  assert.equal((await download('localhost', 'by-name')).received, SIZE);
  await assert.rejects(download('join.alpha.c.test', 'other-name'));
  assert.match(errors.join('\n'), /alpha\.c\.test/);
});
