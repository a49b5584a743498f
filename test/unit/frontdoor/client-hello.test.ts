// The ClientHello reader against real ClientHellos (Node's own TLS client, captured off a raw
// socket), delivered whole, byte by byte and re-framed into several records; and against what is
// not one.
import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import { connect } from 'node:tls';
import { test } from 'node:test';
import { ClientHelloReader, MAX_HELLO_BYTES, readClientHello } from '../../../src/frontdoor/client-hello.ts';

/** The first flight of a Node TLS client with these options, as it arrives at the server. */
async function capture(o: { servername?: string; ALPNProtocols?: string[] }): Promise<Buffer> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  const got = new Promise<Buffer>((resolve) =>
    server.once('connection', (s: Socket) => {
      const chunks: Buffer[] = [];
      s.on('data', (c: Buffer) => {
        chunks.push(c);
        const all = Buffer.concat(chunks);
        if (readClientHello(all).kind !== 'more' || all.length > 64 * 1024) {
          resolve(all);
          s.destroy();
        }
      });
    }),
  );
  const client = connect({ host: '127.0.0.1', port, rejectUnauthorized: false, ...o });
  client.on('error', () => {});
  try {
    return await got;
  } finally {
    client.destroy();
    server.close();
  }
}

/** The same handshake bytes in records of at most `size` bytes each. */
function reframe(hello: Buffer, size: number): Buffer {
  const body = hello.subarray(5, 5 + hello.readUInt16BE(3));
  const out: Buffer[] = [];
  for (let at = 0; at < body.length; at += size) {
    const part = body.subarray(at, at + size);
    const header = Buffer.from([0x16, 3, 1, 0, 0]);
    header.writeUInt16BE(part.length, 3);
    out.push(header, part);
  }
  return Buffer.concat(out);
}

test('a ClientHello with a server name and ALPN gives both; a name is compared without case', async () => {
  const hello = await capture({ servername: 'Alpha.Clusters.Example', ALPNProtocols: ['kctl-tunnel/1', 'h2'] });
  assert.deepEqual(readClientHello(hello), {
    kind: 'hello',
    serverName: 'alpha.clusters.example',
    alpn: ['kctl-tunnel/1', 'h2'],
  });
});

test('a client connecting to an IP address sends no server name: a hello without one', async () => {
  const hello = await capture({});
  const r = readClientHello(hello);
  assert.equal(r.kind, 'hello');
  assert.equal(r.kind === 'hello' && r.serverName, undefined);
});

test('byte by byte it asks for more until the last byte, then reads the same', async () => {
  const hello = await capture({ servername: 'b.example' });
  for (let n = 0; n < hello.length; n++) assert.equal(readClientHello(hello.subarray(0, n)).kind, 'more', `at ${n}`);
  assert.equal((readClientHello(hello) as { serverName?: string }).serverName, 'b.example');
});

test('a ClientHello split over many records (RFC 8446 allows it) reads the same', async () => {
  const hello = await capture({ servername: 'konnectivity.c.example', ALPNProtocols: ['h2'] });
  for (const size of [1, 7, 100]) {
    const framed = reframe(hello, size);
    assert.ok(framed.length > hello.length);
    assert.deepEqual(readClientHello(framed), { kind: 'hello', serverName: 'konnectivity.c.example', alpn: ['h2'] });
    assert.equal(readClientHello(framed.subarray(0, framed.length - 1)).kind, 'more');
  }
});

test('what is not a ClientHello is refused with a reason, and so is one whose lengths do not add up', async () => {
  const bad = (b: Buffer) => {
    const r = readClientHello(b);
    assert.equal(r.kind, 'bad', `${b.subarray(0, 16).toString('hex')}: ${JSON.stringify(r)}`);
    return r.kind === 'bad' ? r.reason : '';
  };
  assert.match(bad(Buffer.from('GET / HTTP/1.1\r\nHost: a\r\n\r\n')), /not a TLS handshake/);
  assert.match(bad(Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n')), /not a TLS handshake/);
  assert.match(bad(Buffer.from([0x16, 9, 9, 0, 4, 1, 0, 0, 0])), /record version/);
  assert.match(bad(Buffer.from([0x16, 3, 1, 0, 4, 2, 0, 0, 0])), /not a ClientHello/);
  assert.match(bad(Buffer.from([0x16, 3, 1, 0, 0])), /empty/);

  const hello = await capture({ servername: 'c.example' });
  // The ClientHello claims more extension bytes than it has (the record and handshake lengths still agree).
  const broken = Buffer.from(hello);
  const bodyStart = 9;
  const sessionLen = broken[bodyStart + 34]!;
  const suitesAt = bodyStart + 35 + sessionLen;
  const compAt = suitesAt + 2 + broken.readUInt16BE(suitesAt);
  const extAt = compAt + 1 + broken[compAt]!;
  broken.writeUInt16BE(broken.readUInt16BE(extAt) + 50, extAt);
  assert.match(bad(broken), /lengths do not add up/);

  // A server name that is not a DNS name.
  const at = hello.indexOf(Buffer.from('c.example'));
  const odd = Buffer.from(hello);
  odd[at] = 0x2f; // '/'
  assert.match(bad(odd), /not a DNS name/);
});

test('a ClientHello larger than the bound is refused before all of it arrives', () => {
  const header = Buffer.from([0x16, 3, 1, 0x40, 0, 1, 0, 0x50, 0]); // a record of 16 KiB claiming a 20 KiB ClientHello
  assert.match(
    (readClientHello(Buffer.concat([header, Buffer.alloc(16 * 1024 - 4)])) as { reason: string }).reason,
    /20480 bytes/,
  );
  // A ClientHello of 16,000 bytes in records of 4 bytes each would take 36 KB with their headers:
  // refused once the bound is reached, not buffered until it is whole.
  const first = Buffer.from([0x16, 3, 1, 0, 4, 1, 0, 0x3e, 0x80]);
  const filler = Buffer.from([0x16, 3, 1, 0, 4, 0, 0, 0, 0]);
  const records = Math.floor(MAX_HELLO_BYTES / filler.length);
  const below = Buffer.concat([first, ...Array.from({ length: records - 1 }, () => filler)]);
  assert.equal(readClientHello(below).kind, 'more');
  const at = Buffer.concat([below, filler]);
  assert.ok(at.length >= MAX_HELLO_BYTES);
  assert.match((readClientHello(at) as { reason: string }).reason, /no whole ClientHello in \d+ bytes/);
});

test('fed as it arrives (one byte per segment, one-byte records too) the reader asks for more until the last byte, then reads the same', async () => {
  const hello = await capture({ servername: 'join.c.example', ALPNProtocols: ['kctl-tunnel/1', 'h2'] });
  for (const bytes of [hello, reframe(hello, 1)]) {
    const reader = new ClientHelloReader();
    for (let n = 0; n < bytes.length - 1; n++)
      assert.equal(reader.push(bytes.subarray(n, n + 1)).kind, 'more', `at byte ${n} of ${bytes.length}`);
    assert.deepEqual(reader.push(bytes.subarray(bytes.length - 1)), {
      kind: 'hello',
      serverName: 'join.c.example',
      alpn: ['kctl-tunnel/1', 'h2'],
    });
  }
  // A first byte that is no handshake record is bad at once, and stays so.
  const reader = new ClientHelloReader();
  assert.equal(reader.push(Buffer.from('G')).kind, 'bad');
  assert.equal(reader.push(hello).kind, 'bad');
});
