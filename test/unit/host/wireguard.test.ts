import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  generatePrivateKey,
  isWireguardKey,
  keyHex,
  publicKeyOf,
  wireguardGet,
  wireguardSet,
  wireguardSetRequest,
} from '../../../src/host/wireguard.ts';
import { tempDir } from '../../helpers.ts';

const raw = (der: Buffer) => der.subarray(der.length - 32).toString('base64');

test('a WireGuard key pair: the public key of a private key is X25519 of it, in base64', () => {
  const pair = generateKeyPairSync('x25519');
  const priv = raw(pair.privateKey.export({ format: 'der', type: 'pkcs8' }));
  assert.equal(publicKeyOf(priv), raw(pair.publicKey.export({ format: 'der', type: 'spki' })));
  const made = generatePrivateKey();
  assert.ok(isWireguardKey(made) && isWireguardKey(publicKeyOf(made)));
  assert.notEqual(generatePrivateKey(), made);
  for (const bad of [undefined, '', 'abc', Buffer.alloc(31).toString('base64'), made.slice(0, -1) + '!'])
    assert.equal(isWireguardKey(bad), false);
});

test('a set request names each peer by its hex key, its endpoint only when given, and replaces its allowed IPs', () => {
  const a = Buffer.alloc(32, 1).toString('base64');
  const b = Buffer.alloc(32, 2).toString('base64');
  const c = Buffer.alloc(32, 3).toString('base64');
  assert.equal(
    wireguardSetRequest({
      privateKey: a,
      listenPort: 51820,
      remove: [c],
      peers: [
        { publicKey: b, endpoint: '10.0.0.2:51820', allowedIPs: ['10.244.1.0/24'], keepaliveSeconds: 25 },
        { publicKey: c, allowedIPs: ['10.244.2.0/24'], keepaliveSeconds: 25 },
      ],
    }),
    [
      'set=1',
      `private_key=${keyHex(a)}`,
      'listen_port=51820',
      `public_key=${keyHex(c)}`,
      'remove=true',
      `public_key=${keyHex(b)}`,
      'endpoint=10.0.0.2:51820',
      'persistent_keepalive_interval=25',
      'replace_allowed_ips=true',
      'allowed_ip=10.244.1.0/24',
      `public_key=${keyHex(c)}`,
      'persistent_keepalive_interval=25',
      'replace_allowed_ips=true',
      'allowed_ip=10.244.2.0/24',
      '',
      '',
    ].join('\n'),
  );
});

test('get reads the device and its peers from the UAPI socket; a set answered with an errno fails naming it', async (t) => {
  const priv = generatePrivateKey();
  const peer = Buffer.alloc(32, 9).toString('base64');
  const socket = join(await tempDir(t), 'wg.sock');
  const requests: string[] = [];
  const server = createServer((c) => {
    let text = '';
    c.on('data', (d) => {
      text += d.toString();
      if (!text.endsWith('\n\n')) return;
      requests.push(text);
      c.end(
        text.startsWith('get=1')
          ? [
              `private_key=${keyHex(priv)}`,
              'listen_port=51820',
              `public_key=${keyHex(peer)}`,
              'endpoint=10.0.0.2:51820',
              'last_handshake_time_sec=1700000000',
              'last_handshake_time_nsec=5',
              'tx_bytes=100',
              'rx_bytes=200',
              'persistent_keepalive_interval=25',
              'allowed_ip=10.244.1.0/24',
              'errno=0',
              '',
              '',
            ].join('\n')
          : 'errno=-22\n\n',
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(socket, resolve));
  t.after(() => server.close());
  assert.deepEqual(await wireguardGet(socket), {
    publicKey: publicKeyOf(priv),
    listenPort: 51820,
    peers: [
      {
        publicKey: peer,
        endpoint: '10.0.0.2:51820',
        allowedIPs: ['10.244.1.0/24'],
        lastHandshake: 1700000000,
        rxBytes: 200,
        txBytes: 100,
        keepaliveSeconds: 25,
      },
    ],
  });
  await assert.rejects(wireguardSet(socket, { listenPort: 1 }), /wireguard set=1 on .*wg\.sock failed: errno=-22/);
  assert.equal(requests.at(-1), 'set=1\nlisten_port=1\n\n');
});
