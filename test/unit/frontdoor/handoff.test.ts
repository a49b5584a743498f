// The front door's handoff to kctl's own listeners: the PROXY v2 header (written, read whole and
// byte by byte, refused when it is not one), and a real TLS server behind a door and a handoff,
// which sees the client's own address and port and completes the handshake; a header with another
// key, or none, never reaches it.
import assert from 'node:assert/strict';
import { connect as tcpConnect, type Socket } from 'node:net';
import { connect, createServer, type TLSSocket } from 'node:tls';
import { test } from 'node:test';
import { DoorHandoff, newHandoffKey } from '../../../src/frontdoor/handoff.ts';
import { MAX_PROXY_HEADER_BYTES, proxyHeader, readProxyHeader } from '../../../src/frontdoor/proxy-header.ts';
import { FrontDoor } from '../../../src/frontdoor/router.ts';
import { makePkiWithNames, quietLogger } from '../konnectivity/fixtures.ts';
import { waitFor } from '../../wait.ts';

const KEY = Buffer.alloc(32, 7);

test('a PROXY v2 header names the client (IPv4, IPv6, IPv4-mapped) and carries the key; read whole or a byte at a time', () => {
  for (const [source, expected] of [
    ['192.0.2.10', '192.0.2.10'],
    ['::ffff:192.0.2.10', '192.0.2.10'],
    ['2001:db8::7', '2001:db8::7'],
    ['fe80::1:2:3:4', 'fe80::1:2:3:4'],
  ] as const) {
    const h = proxyHeader({ address: source, port: 40001 }, { address: '::', port: 443 }, KEY);
    assert.ok(h.length <= MAX_PROXY_HEADER_BYTES);
    const withData = Buffer.concat([h, Buffer.from('after')]);
    const read = readProxyHeader(withData);
    assert.deepEqual(read, { kind: 'header', source: { address: expected, port: 40001 }, key: KEY, length: h.length });
    for (let n = 0; n < h.length; n++) assert.equal(readProxyHeader(h.subarray(0, n)).kind, 'more', `at ${n} bytes`);
  }
});

test('what is not a PROXY v2 header kctl writes is bad', () => {
  const h = proxyHeader({ address: '192.0.2.10', port: 1 }, { address: '192.0.2.1', port: 443 }, KEY);
  assert.equal(readProxyHeader(Buffer.from('\x16\x03\x01')).kind, 'bad', 'a TLS record');
  assert.equal(readProxyHeader(Buffer.from('PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n')).kind, 'bad', 'version 1');
  const local = Buffer.from(h);
  local[12] = 0x20; // command LOCAL
  assert.equal(readProxyHeader(local).kind, 'bad');
  const long = Buffer.from(h);
  long.writeUInt16BE(2000, 14);
  assert.deepEqual(readProxyHeader(long), { kind: 'bad', reason: 'a header of 2016 bytes' });
  const cut = Buffer.from(h);
  cut.writeUInt16BE(h.length - 16 - 1, 14); // the TLV runs past the header's end
  assert.equal(readProxyHeader(cut).kind, 'bad');
});

test('through a door and a handoff a TLS server sees the client itself and completes the handshake; another key or none is closed', async (t) => {
  const name = 'konnectivity.alpha.clusters.test';
  const pki = await makePkiWithNames(t, [name]);
  const key = newHandoffKey();
  const seen: string[] = [];
  const tlsServer = createServer({ cert: pki.serverCert, key: pki.serverKey }, (s: TLSSocket) => s.end('hello'));
  const handoff = new DoorHandoff(
    'konnectivity',
    key,
    (socket, client) => {
      seen.push(`${client.address}:${client.port}`);
      tlsServer.emit('connection', socket);
    },
    quietLogger(),
  );
  const handoffPort = await handoff.listen();
  t.after(() => handoff.close());
  const door = new FrontDoor(
    { port: 0, address: '127.0.0.1' },
    {
      route: async (n) =>
        n === name
          ? {
              cluster: 'alpha',
              endpoint: 'konnectivity',
              host: '127.0.0.1',
              port: handoffPort,
              key: key.toString('hex'),
            }
          : undefined,
    },
    quietLogger(),
  );
  await door.listen();
  t.after(() => door.close());

  const clientPorts: number[] = [];
  for (let i = 0; i < 3; i++) {
    const got = await new Promise<string>((resolve, reject) => {
      const s = connect({ host: '127.0.0.1', port: door.port, servername: name, ca: pki.ca });
      s.once('connect', () => clientPorts.push(s.localPort!));
      let data = '';
      s.on('data', (c: Buffer) => (data += c.toString()));
      s.on('end', () => resolve(data));
      s.on('error', reject);
    });
    assert.equal(got, 'hello');
  }
  assert.deepEqual(
    seen,
    clientPorts.map((p) => `127.0.0.1:${p}`),
    'the listener saw the door, not the client',
  );

  // Straight at the handoff port: a header with another key, and no header at all.
  const closedWithout = (first: Buffer): Promise<void> =>
    new Promise((resolve) => {
      const s: Socket = tcpConnect(handoffPort, '127.0.0.1', () => s.write(first));
      s.on('error', () => {});
      s.on('close', () => resolve());
    });
  const forged = proxyHeader({ address: '192.0.2.99', port: 1 }, { address: '127.0.0.1', port: 443 }, newHandoffKey());
  await closedWithout(Buffer.concat([forged, Buffer.from([0x16, 3, 1])]));
  await closedWithout(Buffer.from([0x16, 3, 1, 0, 5]));
  await waitFor('both refused', 5_000, () => handoff.refused === 2);
  assert.equal(seen.length, 3, 'a connection without the key reached the listener');
});
