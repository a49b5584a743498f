// kctl-tunnel/1, the agent stream between kctl agents and kctl servers without gRPC: framing
// across any split of the bytes, bad frames refused with a reason, and a real server and agent
// choosing it (authentication and refusals as on gRPC, bad peers dropped, others unharmed).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { connect as tlsConnect } from 'node:tls';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { createLogger } from '../../../src/base/log.ts';
import { dialViaProxy } from '../../../src/konnectivity/client.ts';
import {
  FRAME,
  FrameReader,
  LINK_ALPN,
  LinkProtocolError,
  MAX_FRAME,
  encodeFrame,
} from '../../../src/konnectivity/wire/link.ts';
import { encodePacket, packets, type Packet } from '../../../src/konnectivity/wire/protocol.ts';
import { echoServer, makePki, rawAgent, readN, startAgent, startServer, udsOf } from './fixtures.ts';
import { waitFor } from '../../wait.ts';

function dataFrame(connectID: string, payload: Buffer): Buffer {
  return encodeFrame(
    FRAME.DATA,
    Buffer.concat([Buffer.from([connectID.length]), Buffer.from(connectID, 'latin1'), payload]),
  );
}

/** Everything a reader makes of `bytes` fed in the given chunk sizes: frames, and DATA bytes per id. */
function read(bytes: Buffer, chunkSizes: number[]): { frames: [number, string][]; data: Map<string, Buffer[]> } {
  const frames: [number, string][] = [];
  const data = new Map<string, Buffer[]>();
  const r = new FrameReader(
    (kind, body) => frames.push([kind, body.toString('hex')]),
    (id, piece) => (data.get(id) ?? data.set(id, []).get(id)!).push(Buffer.from(piece)),
  );
  let off = 0;
  for (let i = 0; off < bytes.length; i++) {
    const n = chunkSizes[i % chunkSizes.length]!;
    r.push(bytes.subarray(off, off + n));
    off += n;
  }
  return { frames, data };
}

test('frames come out the same however the bytes are split; DATA in the pieces it arrived in', () => {
  const big = randomBytes(70_000);
  const small = randomBytes(10);
  const dial = encodePacket(packets.dialReq('10.0.0.1:443', '123456789012345678'));
  const stream = Buffer.concat([
    encodeFrame(FRAME.HELLO, Buffer.from('{"agentid":["a"]}')),
    dataFrame('7', big),
    encodeFrame(FRAME.PACKET, dial),
    dataFrame('9223372036854775807', small),
    dataFrame('7', Buffer.alloc(0)),
    encodeFrame(FRAME.PACKET, Buffer.alloc(0)),
  ]);
  const want = [
    [FRAME.HELLO, Buffer.from('{"agentid":["a"]}').toString('hex')],
    [FRAME.PACKET, dial.toString('hex')],
    [FRAME.PACKET, ''],
  ];
  for (const sizes of [[stream.length], [1], [3, 16_384, 7], [5], [6], [16_384], [65_536, 2]]) {
    const got = read(stream, sizes);
    assert.deepEqual(got.frames, want, `split ${sizes}`);
    assert.deepEqual(Buffer.concat(got.data.get('7') ?? []), big, `split ${sizes}`);
    assert.deepEqual(Buffer.concat(got.data.get('9223372036854775807') ?? []), small);
    // Never more pieces than the split made of the payload, never an empty one.
    assert.ok((got.data.get('7') ?? []).every((p) => p.length > 0));
    assert.ok((got.data.get('7')?.length ?? 0) <= Math.ceil(big.length / Math.min(...sizes)) + 1);
  }
});

test('a malformed frame is a LinkProtocolError naming what is wrong', () => {
  const head = (length: number, kind: number): Buffer => {
    const b = Buffer.alloc(5);
    b.writeUInt32BE(length, 0);
    b[4] = kind;
    return b;
  };
  const cases: [Buffer, RegExp][] = [
    [head(0, FRAME.PACKET), /frame of 0 bytes/],
    [head(MAX_FRAME + 2, FRAME.PACKET), /frame of \d+ bytes \(at most/],
    [head(10, 99), /unknown frame kind 99/],
    [head(70_000, FRAME.HELLO), /metadata frame of 70000 bytes/],
    [head(1, FRAME.DATA), /DATA frame without a connectID/],
    [Buffer.concat([head(3, FRAME.DATA), Buffer.from([0, 0x31])]), /connectID of 0 bytes/],
    [Buffer.concat([head(3, FRAME.DATA), Buffer.from([5, 0x31])]), /connectID of 5 bytes/],
    [Buffer.concat([head(4, FRAME.DATA), Buffer.from([2, 0x31, 0x78])]), /not a decimal number/],
  ];
  for (const [bytes, why] of cases) {
    const r = new FrameReader(
      () => {},
      () => {},
    );
    assert.throws(
      () => r.push(bytes),
      (err: unknown) => err instanceof LinkProtocolError && why.test(err.message),
      String(why),
    );
  }
});

test('a kctl agent and a kctl server choose kctl-tunnel/1 and carry bytes both ways; an upstream-style agent still gets gRPC', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki);
  const agent = await startAgent(t, pki, [server]);
  await waitFor('agent connected', 10_000, () => agent.snapshot().servers.length === 1);
  assert.equal(agent.snapshot().servers[0]?.transport, LINK_ALPN);
  assert.deepEqual(agent.snapshot().servers[0]?.extensions, ['flow-control/1']);
  const echo = await echoServer(t);
  const tn = await dialViaProxy({ udsPath: udsOf(server).grpc, address: echo.address });
  const payload = randomBytes(3 * 1024 * 1024 + 17);
  tn.write(payload);
  assert.deepEqual(await readN(tn, payload.length), payload);
  tn.destroy();

  const off = await startAgent(t, pki, [server], { agentId: 'plain', extensions: false });
  await waitFor('plain agent connected', 10_000, () => off.snapshot().servers.length === 1);
  assert.equal(off.snapshot().servers[0]?.transport, 'grpc');
});

test('on kctl-tunnel/1 a refused agent gets the same status text as on gRPC, and an accepted one the same headers', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { serverId: 'link-srv', serverCount: () => 3 });
  for (const transport of ['grpc', 'link'] as const) {
    await assert.rejects(
      rawAgent(t, pki, server, { agentId: '', transport }),
      /agentid must be set exactly once/,
      transport,
    );
    await assert.rejects(
      rawAgent(t, pki, server, { creds: null, transport }),
      /no client certificate signed by the cluster CA and no bearer token/,
      transport,
    );
    const a = await rawAgent(t, pki, server, {
      agentId: `n-${transport}`,
      creds: await pki.nodeCert(`n-${transport}`),
      extensions: true,
      transport,
    });
    assert.deepEqual(a.headers.get('serverid'), ['link-srv']);
    assert.deepEqual(a.headers.get('servercount'), ['3']);
    assert.deepEqual(a.headers.get('kctl-extensions'), ['flow-control/1']);
    a.send(packets.ping('42'));
    const pong: Packet = await a.next('KCTL_PONG');
    assert.equal(pong.kctlPing?.nonce, '42');
    a.close();
  }
});

test('a peer that breaks the framing is dropped with a warning; the other agents carry on', async (t) => {
  const pki = await makePki();
  const lines: string[] = [];
  const log = createLogger({
    destination: new Writable({ write: (c: Buffer, _e, cb) => (lines.push(c.toString()), cb()) }),
    pretty: false,
  });
  const server = await startServer(t, pki, { log });
  const agent = await startAgent(t, pki, [server]);
  await waitFor('agent connected', 10_000, () => server.snapshot().agents.length === 1);
  const node = await pki.nodeCert('mallory');
  const garbage = [
    Buffer.from('GET / HTTP/1.1\r\n\r\n'), // length 0x47455420: far over the limit
    encodeFrame(FRAME.HELLO, Buffer.from('not json')),
    encodeFrame(FRAME.PACKET, encodePacket(packets.drain())), // a packet before HELLO
  ];
  for (const bytes of garbage) {
    const s = tlsConnect({
      host: '127.0.0.1',
      port: server.agentPort(),
      ca: pki.ca,
      ...node,
      ALPNProtocols: [LINK_ALPN],
    });
    await new Promise<void>((resolve, reject) => {
      s.once('secureConnect', resolve);
      s.once('error', reject);
    });
    assert.equal(s.alpnProtocol, LINK_ALPN);
    s.on('error', () => {});
    s.write(bytes);
    await new Promise<void>((resolve) => s.once('close', () => resolve()));
  }
  const dropped = lines.filter((l) => l.includes('agent connection dropped'));
  assert.equal(dropped.length, 3, lines.join(''));
  assert.match(dropped[0]!, /protocol error: frame of \d+ bytes/);
  assert.match(dropped[1]!, /metadata frame is not JSON/);
  assert.match(dropped[2]!, /a packet before HELLO/);
  assert.equal(server.snapshot().agents.length, 1);
  const echo = await echoServer(t);
  const tn = await dialViaProxy({ udsPath: udsOf(server).grpc, address: echo.address });
  tn.write('still here');
  assert.equal((await readN(tn, 10)).toString(), 'still here');
  tn.destroy();
  assert.equal(agent.snapshot().servers.length, 1);
});

test('a second HELLO on kctl-tunnel/1, even in the bytes of the first, drops that agent with the reason', async (t) => {
  const pki = await makePki();
  const lines: string[] = [];
  const log = createLogger({
    destination: new Writable({ write: (c: Buffer, _e, cb) => (lines.push(c.toString()), cb()) }),
    pretty: false,
  });
  const server = await startServer(t, pki, { log });
  const hello = encodeFrame(FRAME.HELLO, Buffer.from('{"agentid":["twice"]}'));
  const s = tlsConnect({
    host: '127.0.0.1',
    port: server.agentPort(),
    ca: pki.ca,
    ...(await pki.nodeCert('twice')),
    ALPNProtocols: [LINK_ALPN],
  });
  s.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    s.once('secureConnect', resolve);
    s.once('error', reject);
  });
  const received: Buffer[] = [];
  s.on('data', (c: Buffer) => received.push(c));
  s.write(Buffer.concat([hello, hello]));
  await new Promise<void>((resolve) => s.once('close', () => resolve()));
  const frames: number[] = [];
  new FrameReader(
    (kind) => frames.push(kind),
    () => {},
  ).push(Buffer.concat(received));
  assert.deepEqual(frames, [FRAME.HEADERS], 'the agent was accepted before the second HELLO was read');
  await waitFor('agent gone', 10_000, () => server.snapshot().agents.length === 0);
  const gone = lines.filter((l) => l.includes('agent disconnected'));
  assert.equal(gone.length, 1, lines.join(''));
  assert.match(gone[0]!, /protocol error: frame kind 1 after HELLO/);
});
