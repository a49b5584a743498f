import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeToken, encodeToken, TokenError, wrongRole, type JoinInfo } from '../../src/join/token.ts';
import { selfSignedCert, tempDir } from '../helpers.ts';

async function ca(t: Parameters<typeof tempDir>[0]): Promise<string> {
  return selfSignedCert(await tempDir(t), 'ca', { cn: 'test-ca', ca: true }).pem;
}

test('a token round-trips API URL, CA, konnectivity addresses and bootstrap token', async (t) => {
  const info: JoinInfo = {
    role: 'worker',
    apiServers: ['https://10.77.0.10:6443'],
    caPem: await ca(t),
    konnectivity: ['10.77.0.10:8132'],
    bootstrapToken: 'abcdef.0123456789abcdef',
    clusterDomain: 'cluster.local',
    clusterDNS: '10.96.0.10',
  };
  const token = encodeToken(info);
  assert.match(token, /^kctl1:[A-Za-z0-9_-]+$/);
  assert.deepEqual(decodeToken(token), info);
});

test('a cluster DNS address that is not an IP makes the token malformed', async (t) => {
  const info: JoinInfo = {
    role: 'worker',
    apiServers: ['https://10.77.0.10:6443'],
    caPem: await ca(t),
    konnectivity: [],
    bootstrapToken: 'abcdef.0123456789abcdef',
  };
  assert.equal(decodeToken(encodeToken({ ...info, clusterDNS: 'fd00::a' })).clusterDNS, 'fd00::a');
  assert.throws(
    () => decodeToken(encodeToken({ ...info, clusterDNS: 'dns.local' })),
    /malformed \(cluster DNS "dns\.local" is not an IP address\)/,
  );
});

test("a worker token of a cluster with a front door carries the door's address and names; a door without them is malformed", async (t) => {
  const frontDoor = {
    address: '10.77.0.10:443',
    api: 'alpha.c.test',
    konnectivity: 'konnectivity.alpha.c.test',
    join: 'join.alpha.c.test',
    nodeApi: 'node-api.alpha.c.test',
  };
  const info: JoinInfo = {
    role: 'worker',
    apiServers: ['https://10.77.0.10:6443'],
    caPem: await ca(t),
    konnectivity: ['10.77.0.10:8132'],
    bootstrapToken: 'abcdef.0123456789abcdef',
    frontDoor,
  };
  assert.deepEqual(decodeToken(encodeToken(info)).frontDoor, frontDoor);
  for (const broken of [
    { ...frontDoor, address: '10.77.0.10' },
    { ...frontDoor, nodeApi: '' },
  ])
    assert.throws(
      () => decodeToken(encodeToken({ ...info, frontDoor: broken })),
      /malformed \(the front door needs address \(host:port\), api, konnectivity, join and nodeApi\)/,
    );
});

test('a controller token carries the join endpoints; each role refuses the other role’s token with one line', async (t) => {
  const caPem = await ca(t);
  const base = {
    apiServers: ['https://10.77.0.10:6443'],
    caPem,
    konnectivity: [],
    bootstrapToken: 'abcdef.0123456789abcdef',
  };
  const controller = decodeToken(
    encodeToken({ ...base, role: 'controller', joinServers: ['https://10.77.0.10:9443'] }),
  );
  assert.deepEqual(controller.joinServers, ['https://10.77.0.10:9443']);
  assert.equal(wrongRole(controller, 'controller'), null);
  assert.match(
    wrongRole(controller, 'worker')!.message,
    /^this is a controller join token: use it with `kctl controller --token-file`/,
  );
  const worker = decodeToken(encodeToken({ ...base, role: 'worker' }));
  assert.match(wrongRole(worker, 'controller')!.message, /^this is a worker join token: use it with `kctl worker`/);
  assert.throws(
    () => decodeToken(encodeToken({ ...base, role: 'controller' })),
    /malformed \(a controller token without join endpoints\)/,
  );
});

test('malformed and tampered tokens give one clear line', async (t) => {
  const good = encodeToken({
    role: 'worker',
    apiServers: ['https://10.77.0.10:6443'],
    caPem: await ca(t),
    konnectivity: ['10.77.0.10:8132'],
    bootstrapToken: 'abcdef.0123456789abcdef',
  });
  const flipped = good.slice(0, 40) + (good[40] === 'A' ? 'B' : 'A') + good.slice(41);
  for (const bad of ['', 'hello', 'kctl1:!!!', good.slice(0, good.length - 10), flipped]) {
    assert.throws(
      () => decodeToken(bad),
      (err: Error) =>
        err instanceof TokenError &&
        /^the join token is malformed \(.+\); copy it again/.test(err.message) &&
        !err.message.includes('\n'),
      `accepted: ${bad.slice(0, 20)}`,
    );
  }
  const badSecret = encodeToken({
    role: 'worker',
    apiServers: ['https://x:6443'],
    caPem: await ca(t),
    konnectivity: [],
    bootstrapToken: 'ABC.def',
  });
  assert.throws(() => decodeToken(badSecret), /bootstrap token is not/);
});
