// The wire format: packets of every type round-trip through the code generated from
// konnectivity.proto with int64 ids beyond 2^53 intact (decimal strings, never JS numbers),
// the generated code is current, and the flow-control bookkeeping keeps its promises.
import { splitHostPort } from '../../../src/base/addresses.ts';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { ConnectionFlow } from '../../../src/konnectivity/wire/flow.ts';
import { PROTO_SHA256, PacketType } from '../../../src/konnectivity/wire/gen/konnectivity.ts';
import {
  decodePacket,
  encodePacket,
  newRandom,
  packets,
  parseIdentifiers,
  formatIdentifiers,
  type Packet,
} from '../../../src/konnectivity/wire/protocol.ts';

const BIG = '9223372036854775807'; // 2^63 - 1
const ABOVE_2_53 = '9007199254740993'; // 2^53 + 1: a JS number would round it

test('every packet type round-trips, int64 ids stay exact decimal strings', () => {
  const cases: Packet[] = [
    packets.dialReq('[2001:db8::1]:10250', BIG, 'abcd'),
    packets.dialRsp(BIG, ABOVE_2_53),
    packets.dialRsp(BIG, '0', 'dial tcp 10.0.0.1:1: connect: connection refused'),
    packets.closeReq(ABOVE_2_53),
    packets.closeRsp(ABOVE_2_53, 'boom'),
    packets.data(ABOVE_2_53, Buffer.from([0, 1, 2, 255])),
    packets.dialCls(BIG),
    packets.drain(),
    packets.credit(ABOVE_2_53, 262144),
    packets.ping(BIG),
    packets.pong(BIG),
    packets.datagram('node-b', Buffer.from([0, 255, 1])),
  ];
  assert.deepEqual(
    new Set(cases.map((p) => p.type)),
    new Set(Object.keys(PacketType)),
    'a case for every PacketType in the .proto',
  );
  for (const p of cases) {
    const back = decodePacket(encodePacket(p));
    assert.deepEqual(back, p, String(p.type));
  }
  // Every id in a decoded packet is a string, whatever its size.
  const ids = decodePacket(encodePacket(packets.dialRsp(BIG, '7'))).dialResponse;
  assert.equal(typeof ids?.random, 'string');
  assert.equal(typeof ids?.connectID, 'string');
});

test('63-bit dial ids survive exactly, in both directions', () => {
  for (let i = 0; i < 1000; i++) {
    const random = i === 0 ? BIG : newRandom();
    const back = decodePacket(encodePacket(packets.dialReq('a:1', random)));
    assert.equal(back.dialRequest?.random, random);
    assert.equal(decodePacket(encodePacket(packets.dialCls(random))).closeDial?.random, random);
  }
});

test('absent fields decode as proto3 defaults; unknown packet types stay numbers', () => {
  assert.deepEqual(decodePacket(Buffer.alloc(0)), { type: 'DIAL_REQ' });
  assert.deepEqual(decodePacket(Buffer.from([0x08, 0x04, 0x22, 0x00])), {
    type: 'DATA',
    data: { connectID: '0', error: '', data: Buffer.alloc(0) },
  });
  assert.deepEqual(decodePacket(Buffer.from([0x08, 42])), { type: 42 });
  assert.throws(() => decodePacket(Buffer.from([0xff, 0xff, 0xff, 0x07, 0x01])), 'an invalid wire type is an error');
});

test('a decoded DATA payload is a view of the received message, not a copy', () => {
  const wire = encodePacket(packets.data('3', Buffer.alloc(64 * 1024, 0x61)));
  const back = decodePacket(wire);
  assert.equal(back.data?.data.length, 64 * 1024);
  assert.equal(back.data?.data.buffer, wire.buffer);
});

test('the wire bytes are what any protobuf peer expects (field numbers, varint int64)', () => {
  // DIAL_RSP (type 1) { dialResponse(3) { connectID(2): 2^53+1, random(3): 2^63-1 } }
  const b = encodePacket(packets.dialRsp(BIG, ABOVE_2_53));
  assert.equal(b[0], 0x08); // field 1 varint
  assert.equal(b[1], 0x01); // DIAL_RSP
  assert.equal(b[2], 0x1a); // field 3, length-delimited
  const inner = b.subarray(4);
  assert.equal(inner[0], 0x10); // connectID field 2 varint
  // The upstream-unknown extension field (DialRequest.kctlTraceID = 100) is skippable.
  const withTrace = encodePacket(packets.dialReq('a:1', '5', 'tr'));
  assert.ok(withTrace.includes(Buffer.from([0xa2, 0x06])), 'field 100 tag, wire type 2');
});

test('dial ids are positive 63-bit decimal strings', () => {
  for (let i = 0; i < 1000; i++) {
    const r = newRandom();
    assert.match(r, /^[1-9][0-9]{0,18}$/);
    assert.ok(BigInt(r) > 0n && BigInt(r) < 1n << 63n);
  }
});

test('the generated code is current with konnectivity.proto (no package line)', async () => {
  const file = await readFile(new URL('../../../src/konnectivity/wire/konnectivity.proto', import.meta.url), 'utf8');
  assert.equal(
    PROTO_SHA256,
    createHash('sha256').update(file).digest('hex'),
    'konnectivity.proto changed: run `npm run gen`',
  );
  assert.doesNotMatch(file, /^\s*package\s/m);
  assert.match(file, /service ProxyService/);
  assert.match(file, /rpc Connect\(stream Packet\) returns \(stream Packet\)/);
});

test('agent identifiers and addresses parse like upstream', () => {
  const ids = parseIdentifiers('host=Node1&ipv4=10.0.0.5&ipv6=0:0:0:0:0:0:0:1&cidr=10.0.0.0/8&default-route=true');
  assert.deepEqual(ids, {
    host: ['node1'],
    ipv4: ['10.0.0.5'],
    ipv6: ['::1'],
    cidr: ['10.0.0.0/8'],
    defaultRoute: true,
  });
  assert.equal(
    formatIdentifiers({ host: ['n'], ipv4: ['1.2.3.4'], defaultRoute: true }),
    'host=n&ipv4=1.2.3.4&default-route=true',
  );
  assert.deepEqual(splitHostPort('[2001:DB8::1]:10250'), { host: '2001:db8::1', port: 10250 });
  assert.deepEqual(splitHostPort('node-1:10250'), { host: 'node-1', port: 10250 });
  assert.equal(splitHostPort('node-1'), null);
  assert.equal(splitHostPort('node-1:0'), null);
});

test('flow control: a sender never exceeds its credit and holds at most the overflow', () => {
  const f = new ConnectionFlow({ negotiated: true, window: 100, bufferLimit: 0 });
  assert.equal(f.take(Buffer.alloc(60))?.length, 60);
  assert.equal(f.take(Buffer.alloc(60))?.length, 40); // 20 held
  assert.equal(f.open, false);
  assert.equal(f.heldLength, 20);
  assert.equal(f.take(Buffer.alloc(5)), null);
  const released = f.grant(10);
  assert.deepEqual(
    released.map((b) => b.length),
    [10],
  );
  assert.equal(f.heldLength, 15);
  assert.deepEqual(
    f.grant(100).map((b) => b.length),
    [10, 5],
  );
  assert.equal(f.open, true);
});

test('flow control: the receiver grants in batches as its sink drains; without the extension it enforces a limit', () => {
  const f = new ConnectionFlow({ negotiated: true, window: 100, bufferLimit: 0 });
  assert.equal(f.received(100), true);
  assert.equal(f.flushed(20), 0);
  assert.equal(f.flushed(10), 30); // batch = window / 4 = 25
  assert.equal(f.received(250), false, 'a kctl peer over twice its window is broken');
  const u = new ConnectionFlow({ negotiated: false, window: 100, bufferLimit: 1000 });
  assert.equal(u.received(1000), true);
  assert.equal(u.received(1), false);
  assert.equal(u.flushed(1001), 0, 'no credit packets to upstream peers');
});
