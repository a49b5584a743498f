// The hand-framed gRPC server the ProxyService frontend runs on: its DATA framing is the protobuf
// encoding byte for byte, messages split across or packed into HTTP/2 chunks arrive whole, and a
// stock gRPC client (grpc-js here; kube-apiserver's Go client in the e2e tests) gets the statuses
// it expects.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http2 from 'node:http2';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { GrpcStatus, dataHeader, packetServer, type PacketCall } from '../../../src/konnectivity/server/grpc-h2.ts';
import { listenHttp } from '../../../src/konnectivity/server/listen.ts';
import { decodePacket, encodePacket, packets, type Packet } from '../../../src/konnectivity/wire/protocol.ts';

test('a DATA header followed by its payload is exactly the gRPC message of that Packet', () => {
  for (const id of ['0', '1', '127', '128', '4611686018427387904', '9223372036854775807'])
    for (const len of [0, 1, 127, 128, 16_383, 16_384, 65_536, 1_048_577]) {
      const payload = randomBytes(len);
      const body = encodePacket(packets.data(id, payload));
      const prefix = Buffer.alloc(5);
      prefix.writeUInt32BE(body.length, 1);
      assert.deepEqual(
        Buffer.concat([dataHeader(id, len), payload]),
        Buffer.concat([prefix, body]),
        `connectID ${id}, ${len} bytes`,
      );
    }
});

async function echoServer(t: { after: (fn: () => Promise<void>) => void }, maxMessage = 1024 * 1024) {
  const path = join(tmpdir(), `kctl-h2-${process.pid}-${Math.random().toString(36).slice(2)}.sock`);
  const server = packetServer({
    maxMessage,
    methods: {
      '/Echo/Echo': (call: PacketCall) => {
        call.on('data', (p: Packet) => call.write(p));
        call.on('end', () => call.end());
      },
    },
  });
  await listenHttp(server.server, path);
  t.after(() => server.close());
  return path;
}

function bidi(path: string, method: string) {
  const client = new grpc.Client(`unix:${path}`, grpc.credentials.createInsecure(), {
    'grpc.use_local_subchannel_pool': 1,
  });
  const call = client.makeBidiStreamRequest<Buffer, Packet>(method, (b: Buffer) => b, decodePacket);
  const got: Packet[] = [];
  call.on('data', (p: Packet) => got.push(p));
  call.on('error', () => {});
  const status = new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
  return { call, got, status, close: () => client.close() };
}

test('packets echo through a stock gRPC client, and the call ends with status OK', async (t) => {
  const path = await echoServer(t);
  const c = bidi(path, '/Echo/Echo');
  const sent = [
    packets.dialReq('10.0.0.1:443', '77'),
    packets.data('5', randomBytes(200_000)),
    packets.data('5', Buffer.alloc(0)),
    packets.closeReq('5'),
  ];
  for (const p of sent) c.call.write(encodePacket(p));
  c.call.end();
  const st = await c.status;
  c.close();
  assert.equal(st.code, grpc.status.OK, st.details);
  assert.deepEqual(
    c.got.map((p) => encodePacket(p)),
    sent.map((p) => encodePacket(p)),
  );
});

test('messages split across HTTP/2 DATA frames at any byte, or many in one frame, arrive whole and in order', async (t) => {
  const path = await echoServer(t);
  const session = http2.connect('http://localhost', { createConnection: () => connect(path) });
  t.after(() => session.close());
  const stream = session.request({ ':method': 'POST', ':path': '/Echo/Echo', 'content-type': 'application/grpc' });
  const sent = Array.from({ length: 40 }, (_, i) => packets.data(String(i + 1), randomBytes(i * 997)));
  const wire = Buffer.concat(
    sent.map((p) => {
      const body = encodePacket(p);
      const prefix = Buffer.alloc(5);
      prefix.writeUInt32BE(body.length, 1);
      return Buffer.concat([prefix, body]);
    }),
  );
  // Cut the bytes at odd places: single bytes, prefixes split in two, several messages at once.
  for (let pos = 0, step = 1; pos < wire.length; pos += step, step = 1 + ((step * 7 + 3) % 6007))
    stream.write(wire.subarray(pos, pos + step));
  stream.end();
  const back: Buffer[] = [];
  stream.on('data', (c: Buffer) => back.push(c));
  const trailers = new Promise<http2.IncomingHttpHeaders>((resolve) => stream.on('trailers', resolve));
  await new Promise((r) => stream.on('end', r));
  assert.equal((await trailers)['grpc-status'], '0');
  assert.deepEqual(Buffer.concat(back), wire);
});

test('an unknown method is UNIMPLEMENTED, a message over the limit RESOURCE_EXHAUSTED, an undecodable one INTERNAL', async (t) => {
  const path = await echoServer(t, 1000);
  const unknown = bidi(path, '/Nope/Nope');
  assert.equal((await unknown.status).code, grpc.status.UNIMPLEMENTED);
  unknown.close();

  const big = bidi(path, '/Echo/Echo');
  big.call.write(encodePacket(packets.data('1', Buffer.alloc(2000))));
  const st = await big.status;
  assert.equal(st.code, grpc.status.RESOURCE_EXHAUSTED, st.details);
  assert.equal(GrpcStatus.RESOURCE_EXHAUSTED, grpc.status.RESOURCE_EXHAUSTED);
  big.close();

  const junk = bidi(path, '/Echo/Echo');
  junk.call.write(Buffer.from([0xff, 0xff, 0xff, 0x07, 0x01]));
  const js = await junk.status;
  assert.equal(js.code, grpc.status.INTERNAL);
  assert.match(js.details, /deserializ/i);
  junk.close();
});

test('DATA written in one turn of the event loop reaches the client as one message, in order with other packets; every write callback runs', async (t) => {
  const path = join(tmpdir(), `kctl-h2-${process.pid}-${Math.random().toString(36).slice(2)}.sock`);
  const parts = [randomBytes(16_384), randomBytes(16_384), randomBytes(7)];
  let flushed = 0;
  const server = packetServer({
    maxMessage: 1024 * 1024,
    methods: {
      '/Burst/Burst': (call: PacketCall) => {
        call.on('data', () => {
          // What the server does with one agent read that TLS handed over in pieces.
          for (const part of parts) call.write(packets.data('9', part), () => flushed++);
          call.write(packets.data('10', Buffer.from('other')), () => flushed++);
          call.write(packets.closeRsp('9'));
          call.write(packets.data('9', Buffer.from('after')), () => flushed++);
          call.end();
        });
      },
    },
  });
  await listenHttp(server.server, path);
  t.after(() => server.close());
  const c = bidi(path, '/Burst/Burst');
  c.call.write(encodePacket(packets.dialReq('10.0.0.1:443', '1')));
  const st = await c.status;
  c.close();
  assert.equal(st.code, grpc.status.OK, st.details);
  assert.deepEqual(
    c.got.map((p) => encodePacket(p)),
    [
      packets.data('9', Buffer.concat(parts)),
      packets.data('10', Buffer.from('other')),
      packets.closeRsp('9'),
      packets.data('9', Buffer.from('after')),
    ].map((p) => encodePacket(p)),
  );
  assert.equal(flushed, 5);
});
