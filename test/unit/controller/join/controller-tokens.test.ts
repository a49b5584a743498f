import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import {
  checkControllerTokenExpiry,
  CONTROLLER_TOKEN_TYPE,
  ControllerTokenStore,
  hashSecret,
  TokenRejected,
} from '../../../../src/controller/join/controller-tokens.ts';
import { invalidateToken, listTokens, parseExpiry, parseUses } from '../../../../src/controller/join/tokens.ts';
import { fakeSecrets } from '../fake-secrets.ts';

const ID = 'abc123';
const SECRET = '0123456789abcdef';
const TOKEN = `${ID}.${SECRET}`;
const HOUR = 3_600_000;

const rejectedWith = (status: number, message: RegExp) => (err: unknown) =>
  err instanceof TokenRejected && err.status === status && message.test(err.message);

test('the API only ever sees the SHA-256 of the secret, in a Secret that is not a bootstrap token', async (t) => {
  const f = await fakeSecrets(t);
  const store = new ControllerTokenStore(f.kube);
  await store.create({ id: ID, secret: SECRET, expiryMs: HOUR, uses: 1 });
  await store.check(TOKEN);
  for (const r of f.api.requests) {
    assert.ok(!r.body.includes(SECRET), `${r.method} ${r.path} carried the secret`);
    assert.ok(
      !r.body.includes(Buffer.from(SECRET).toString('base64')),
      `${r.method} ${r.path} carried the secret in base64`,
    );
  }
  const stored = f.secrets.get(`kctl-controller-token-${ID}`)!;
  assert.equal(stored.type, CONTROLLER_TOKEN_TYPE);
  assert.notEqual(stored.type, 'bootstrap.kubernetes.io/token');
  assert.equal(f.secrets.get(`bootstrap-token-${ID}`), undefined);
  const hash = Buffer.from(stored.data!['secret-sha256']!, 'base64').toString();
  assert.equal(hash, createHash('sha256').update(SECRET).digest('hex'));
  assert.equal(hashSecret(SECRET), hash);
  assert.ok(!Object.keys(stored.data!).includes('token-secret'));
});

test('a token is accepted only with its own secret; a wrong secret, an unknown id or a malformed token is rejected alike', async (t) => {
  const f = await fakeSecrets(t);
  const store = new ControllerTokenStore(f.kube);
  await store.create({ id: ID, secret: SECRET, expiryMs: HOUR, uses: 1 });
  const checked = await store.check(TOKEN);
  assert.deepEqual(
    { id: checked.token.id, uses: checked.token.uses, used: checked.token.used },
    { id: ID, uses: 1, used: 0 },
  );
  const never =
    /rejected \(expired, invalidated or never issued\); create a new one with: kctl token create --role controller$/;
  await assert.rejects(store.check(`${ID}.fedcba9876543210`), rejectedWith(401, never));
  await assert.rejects(store.check(`zzz999.${SECRET}`), rejectedWith(401, never));
  await assert.rejects(store.check('not-a-token'), rejectedWith(401, never));
});

test('an expired token is rejected', async (t) => {
  const f = await fakeSecrets(t);
  let now = Date.parse('2030-01-01T00:00:00Z');
  const store = new ControllerTokenStore(f.kube, () => now);
  await store.create({ id: ID, secret: SECRET, expiryMs: HOUR, uses: 1 });
  now += HOUR - 1000;
  await store.check(TOKEN);
  now += 1000;
  await assert.rejects(store.check(TOKEN), rejectedWith(401, /rejected \(expired, invalidated or never issued\)/));
});

test('a controller token must expire, within 7 days', () => {
  for (const ok of ['1s', '1h', '24h', '7d', '168h'])
    assert.doesNotThrow(() => checkControllerTokenExpiry(parseExpiry(ok), ok), ok);
  assert.throws(
    () => checkControllerTokenExpiry(parseExpiry('0'), '0'),
    /^Error: --expiry 0: a controller token hands over the cluster's CA keys and must expire; use at most 7d \(default 1h\)$/,
  );
  for (const long of ['8d', '168h1s', '30d'])
    assert.throws(
      () => checkControllerTokenExpiry(parseExpiry(long), long),
      new RegExp(`--expiry ${long} is longer than a controller token may live`),
    );
});

test('`kctl token create --role controller` refuses --expiry 0, more than 7d and a bad --uses with one line, before it needs a cluster', () => {
  const root = new URL('../../../..', import.meta.url).pathname;
  const kctl = (...args: string[]) =>
    spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/index.ts', '--data-dir', '/nonexistent', ...args], {
      cwd: root,
      encoding: 'utf8',
    });
  for (const [args, expect] of [
    [['--expiry', '0'], /^kctl: --expiry 0: a controller token hands over the cluster's CA keys and must expire/],
    [['--expiry', '8d'], /^kctl: --expiry 8d is longer than a controller token may live/],
    [['--uses', '0'], /^kctl: --uses "0" is not a number of joins/],
  ] as const) {
    const r = kctl('token', 'create', '--role', 'controller', ...args);
    assert.notEqual(r.status, 0);
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
    assert.match(r.stderr.trim(), expect);
  }
});

test('--uses takes a whole number from 1', () => {
  assert.equal(parseUses('1'), 1);
  assert.equal(parseUses('3'), 3);
  for (const bad of ['0', '-1', '1.5', 'two', '']) assert.throws(() => parseUses(bad), /is not a number of joins/, bad);
});

test('each join takes one use; a used-up token is refused, telling its holder so', async (t) => {
  const f = await fakeSecrets(t);
  const store = new ControllerTokenStore(f.kube);
  await store.create({ id: ID, secret: SECRET, expiryMs: HOUR, uses: 2 });
  assert.equal((await store.takeUse(await store.check(TOKEN))).used, 1);
  assert.equal((await store.takeUse(await store.check(TOKEN))).used, 2);
  await assert.rejects(
    store.check(TOKEN),
    rejectedWith(401, /^the join token is used up \(2 joins\); create a new one/),
  );
  // Someone without the secret learns nothing more than "rejected".
  await assert.rejects(
    store.check(`${ID}.fedcba9876543210`),
    rejectedWith(401, /rejected \(expired, invalidated or never issued\)/),
  );
});

test('two joins at once with a single-use token: exactly one takes it, the other is refused', async (t) => {
  const f = await fakeSecrets(t);
  const store = new ControllerTokenStore(f.kube);
  await store.create({ id: ID, secret: SECRET, expiryMs: HOUR, uses: 1 });
  // Both read the token while it still had its use, as two requests arriving together do.
  const [a, b] = await Promise.all([store.check(TOKEN), store.check(TOKEN)]);
  const results = await Promise.allSettled([store.takeUse(a), store.takeUse(b)]);
  assert.equal(results.filter((r) => r.status === 'fulfilled').length, 1);
  const refused = results.find((r) => r.status === 'rejected');
  assert.ok(refused && rejectedWith(401, /used up \(1 join\)/)(refused.reason), String(refused && refused.reason));
  assert.equal(f.conflicts(), 1, 'the loser was turned away by the resourceVersion check');
  const stored = f.secrets.get(`kctl-controller-token-${ID}`)!;
  assert.equal(Buffer.from(stored.data!.used!, 'base64').toString(), '1');
});

test('of three joins at once with a two-use token, two get in', async (t) => {
  const f = await fakeSecrets(t);
  const store = new ControllerTokenStore(f.kube);
  await store.create({ id: ID, secret: SECRET, expiryMs: HOUR, uses: 2 });
  const checked = await Promise.all([store.check(TOKEN), store.check(TOKEN), store.check(TOKEN)]);
  const results = await Promise.allSettled(checked.map((c) => store.takeUse(c)));
  assert.equal(results.filter((r) => r.status === 'fulfilled').length, 2);
});

test('a join that failed after taking a use gives it back', async (t) => {
  const f = await fakeSecrets(t);
  const store = new ControllerTokenStore(f.kube);
  await store.create({ id: ID, secret: SECRET, expiryMs: HOUR, uses: 1 });
  await store.takeUse(await store.check(TOKEN));
  await store.giveBackUse(ID);
  assert.equal((await store.takeUse(await store.check(TOKEN))).used, 1);
});

test('list shows role, expiry and uses left, never the secret or its hash; invalidate deletes a controller token', async (t) => {
  const f = await fakeSecrets(t);
  const store = new ControllerTokenStore(f.kube);
  await store.create({ id: ID, secret: SECRET, expiryMs: HOUR, uses: 3 });
  await store.takeUse(await store.check(TOKEN));
  const listed = await listTokens(f.kube);
  assert.equal(listed.length, 1);
  assert.equal(listed[0]!.id, ID);
  assert.equal(listed[0]!.role, 'controller');
  assert.equal(listed[0]!.usesLeft, 2);
  assert.ok(Math.abs(Date.parse(listed[0]!.expires!) - Date.now() - HOUR) < 5000, listed[0]!.expires!);
  const text = JSON.stringify(listed);
  assert.ok(!text.includes(SECRET) && !text.includes(hashSecret(SECRET)), text);
  await invalidateToken(f.kube, ID);
  assert.deepEqual(await listTokens(f.kube), []);
  await assert.rejects(store.check(TOKEN), rejectedWith(401, /rejected/));
  await assert.rejects(invalidateToken(f.kube, ID), /^Error: no token with id abc123; see kctl token list$/);
});

/** A controller token as kctl stored it before: a bootstrap-token Secret with the secret in plain. */
async function oldFormatToken(f: Awaited<ReturnType<typeof fakeSecrets>>, id: string, secret: string): Promise<void> {
  await f.kube.request('POST', '/api/v1/namespaces/kube-system/secrets', {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'bootstrap.kubernetes.io/token',
    metadata: { name: `bootstrap-token-${id}`, namespace: 'kube-system', labels: { 'kctl.dev/role': 'controller' } },
    stringData: {
      'token-id': id,
      'token-secret': secret,
      'usage-bootstrap-authentication': 'false',
      description: 'kctl controller join token',
    },
  });
}

test('a controller token stored the old way (bootstrap token, plain secret) is refused with what to do, listed with no uses left, and pruned', async (t) => {
  const f = await fakeSecrets(t);
  const store = new ControllerTokenStore(f.kube);
  await oldFormatToken(f, 'old111', SECRET);
  await assert.rejects(
    store.check(`old111.${SECRET}`),
    rejectedWith(
      401,
      /^the join token was made by an older kctl, which stored controller tokens in plain; this version refuses them: run kctl token invalidate old111 and create a new one/,
    ),
  );
  // Without its secret, it is just "rejected".
  await assert.rejects(
    store.check('old111.fedcba9876543210'),
    rejectedWith(401, /rejected \(expired, invalidated or never issued\)/),
  );
  const listed = await listTokens(f.kube);
  assert.deepEqual(
    listed.map((x) => [x.id, x.role, x.usesLeft]),
    [['old111', 'controller', 0]],
  );
  assert.ok(!JSON.stringify(listed).includes(SECRET));
  assert.deepEqual(await store.prune(), { expired: [], oldFormat: ['old111'] });
  assert.equal(f.secrets.size, 0);
});

test('pruning deletes expired controller tokens and keeps live ones', async (t) => {
  const f = await fakeSecrets(t);
  let now = Date.parse('2030-01-01T00:00:00Z');
  const store = new ControllerTokenStore(f.kube, () => now);
  await store.create({ id: 'short1', secret: SECRET, expiryMs: 60_000, uses: 1 });
  await store.create({ id: 'long11', secret: SECRET, expiryMs: HOUR, uses: 1 });
  now += 120_000;
  assert.deepEqual(await store.prune(), { expired: ['short1'], oldFormat: [] });
  assert.deepEqual([...f.secrets.keys()], ['kctl-controller-token-long11']);
});
