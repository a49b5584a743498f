// Bad input is harmless. Unknown packet types, payload-less packets, unknown or foreign ids,
// oversized frames, undecodable messages, garbage on the unix sockets and on the agent port,
// and an unauthenticated Connect: each is ignored, or answered with a close or an error, on
// the offending stream only. The server never crashes, and connections that belong to
// someone else (another frontend's tunnel, another agent's tunnel or pending dial) never
// notice: a healthy tunnel keeps echoing after every abuse, and the tables end at baseline.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { dialViaProxy, type ProxyTunnel } from '../../../src/konnectivity/client.ts';
import { PROXY_METHOD } from '../../../src/konnectivity/server/frontends.ts';
import { decodePacket, encodePacket, packets, type Packet } from '../../../src/konnectivity/wire/protocol.ts';
import type { KonnectivityServer } from '../../../src/konnectivity/server/server.ts';
import { echoServer, makePki, rawAgent, readN, startAgent, startServer, udsOf, type RawAgent } from './fixtures.ts';
import { waitFor } from '../../wait.ts';

type T = Parameters<typeof startServer>[0];
const MiB = 1024 * 1024;
/** The server's grpc.max_receive_message_length on both the frontend and the agent port. */
const SERVER_MAX_RECEIVE = 16 * MiB;

/** A hand-driven Proxy stream that can also send raw bytes as one gRPC message. */
interface RawFrontend {
  send(p: Packet | Buffer): void;
  next(type?: Packet['type'], timeoutMs?: number): Promise<Packet>;
  /** Nothing (of that type) arrives within `ms`. */
  silent(ms: number, type?: Packet['type']): Promise<void>;
  status: Promise<grpc.StatusObject>;
  done(): boolean;
  close(): void;
}

function rawFrontend(t: T, udsPath: string): RawFrontend {
  const client = new grpc.Client(`unix:${udsPath}`, grpc.credentials.createInsecure(), {
    'grpc.use_local_subchannel_pool': 1,
  });
  const call = client.makeBidiStreamRequest<Buffer, Packet>(PROXY_METHOD, (b: Buffer) => b, decodePacket);
  const close = (): void => {
    call.cancel();
    client.close();
  };
  t.after(close);
  const queue: Packet[] = [];
  call.on('data', (p: Packet) => queue.push(p));
  call.on('error', () => {});
  let finished = false;
  const status = new Promise<grpc.StatusObject>((resolve) =>
    call.on('status', (s: grpc.StatusObject) => {
      finished = true;
      resolve(s);
    }),
  );
  const take = (type?: Packet['type']): Packet | undefined => {
    const i = queue.findIndex((p) => type === undefined || p.type === type);
    return i >= 0 ? queue.splice(i, 1)[0] : undefined;
  };
  return {
    send: (p) => call.write(Buffer.isBuffer(p) ? p : encodePacket(p)),
    // Bounds only against a packet that never comes: the unit suite runs while the long tests
    // start their clusters beside it, and one run here missed a 5 s bound twice.
    next: (type, timeoutMs = 20_000) =>
      waitFor(`${type ?? 'a packet'} on the raw Proxy stream`, timeoutMs, () => take(type)),
    async silent(ms, type) {
      await new Promise((r) => setTimeout(r, ms));
      const p = take(type);
      assert.equal(p, undefined, `expected no ${type ?? 'packet'}, got ${JSON.stringify(p)}`);
    },
    status,
    done: () => finished,
    close,
  };
}

/** Writes bytes to a stream and reads until the peer closes (bounded). */
async function talk(to: string | number, bytes: Buffer | string): Promise<string> {
  const s = typeof to === 'number' ? connect(to, '127.0.0.1') : connect(to);
  const chunks: Buffer[] = [];
  const timer = setTimeout(() => s.destroy(new Error('peer did not close the connection within 20 s')), 20_000);
  try {
    return await new Promise<string>((resolve, reject) => {
      s.on('data', (c: Buffer) => chunks.push(c));
      // A reset is the peer closing on us: what this test expects from garbage.
      s.on('error', (err: NodeJS.ErrnoException) => {
        if (err.code !== 'ECONNRESET' && err.code !== 'EPIPE') reject(err);
      });
      s.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
      s.write(bytes);
    });
  } finally {
    clearTimeout(timer);
  }
}

async function echoRoundTrip(tn: ProxyTunnel, what: string): Promise<void> {
  const msg = Buffer.from(`${what} ${randomBytes(6).toString('hex')}`);
  tn.write(msg);
  const back = readN(tn, msg.length);
  tn.resume(); // readN leaves the stream explicitly paused
  assert.equal((await back).toString(), msg.toString(), `healthy tunnel after: ${what}`);
}

async function metric(server: KonnectivityServer, line: RegExp): Promise<string | undefined> {
  const text = await (await fetch(`http://127.0.0.1:${server.adminPort()}/metrics`)).text();
  return text.split('\n').find((l) => line.test(l));
}

test(
  'bad input is harmless: closes or errors on the offending stream only, no crash, others untouched',
  { timeout: 120_000 },
  async (t) => {
    const pki = await makePki();
    const server = await startServer(t, pki, { serverId: 'ctrl-bad', dialTimeoutMs: 25_000 });
    const uds = udsOf(server);
    const echo = await echoServer(t);

    // A real agent that serves 127.0.0.1 (destHost), and a raw "victim" agent whose tunnel and
    // pending dial the abusers aim at. Both agents number their connections from 1, so foreign
    // connectIDs collide across agents on purpose.
    const agent = await startAgent(t, pki, [server], {
      agentId: 'node-1',
      identifiers: { host: ['node-1'], ipv4: ['127.0.0.1'] },
    });
    const victim = await rawAgent(t, pki, server, {
      agentId: 'victim',
      creds: await pki.nodeCert('victim'),
      identifiers: 'host=victim&ipv4=10.9.9.9',
    });
    await waitFor(
      'two agents',
      10_000,
      () => server.snapshot().agents.length === 2 && agent.snapshot().servers.length === 1,
    );

    // The healthy tunnel, carrying data throughout.
    const healthy = await dialViaProxy({ udsPath: uds.grpc, address: echo.address });
    t.after(() => healthy.destroy());
    await echoRoundTrip(healthy, 'setup');
    assert.equal(healthy.connectID, '1');

    // The victim's established tunnel (connectID 1 on the victim agent).
    const victimDial = dialViaProxy({ udsPath: uds.grpc, address: 'victim:10250' });
    const vReq = await victim.next('DIAL_REQ');
    victim.send(packets.dialRsp(vReq.dialRequest?.random ?? '', '1'));
    const victimTunnel = await victimDial;
    t.after(() => victimTunnel.destroy());
    // The victim's pending dial, left unanswered until the end.
    const pendingFe = rawFrontend(t, uds.grpc);
    pendingFe.send(packets.dialReq('victim:10251', '5000000000000000001'));
    assert.equal((await victim.next('DIAL_REQ')).dialRequest?.random, '5000000000000000001');
    const pendingRandom = '5000000000000000001';

    const victimOk = async (what: string): Promise<void> => {
      victimTunnel.write(`to victim: ${what}`);
      const d = await victim.next('DATA');
      assert.deepEqual(
        [d.data?.connectID, d.data?.data.toString()],
        ['1', `to victim: ${what}`],
        `victim tunnel after: ${what}`,
      );
      victim.send(packets.data('1', Buffer.from(`from victim: ${what}`)));
      const back = readN(victimTunnel, `from victim: ${what}`.length);
      victimTunnel.resume();
      assert.equal((await back).toString(), `from victim: ${what}`);
      assert.equal(server.snapshot().pendingDials, 1, `the victim's pending dial is still pending after: ${what}`);
    };
    const allOk = async (what: string): Promise<void> => {
      await echoRoundTrip(healthy, what);
      await victimOk(what);
      assert.equal(
        (await fetch(`http://127.0.0.1:${server.adminPort()}/healthz`)).status,
        200,
        `server alive after: ${what}`,
      );
    };
    await allOk('setup');
    const baseline = server.snapshot();
    assert.deepEqual(
      [baseline.agents.length, baseline.establishedConnections, baseline.pendingDials, baseline.closingConnections],
      [2, 2, 1, 0],
    );

    await t.test(
      'frontend: unknown packet type and payload-less packets are ignored; the stream still dials',
      async () => {
        const fe = rawFrontend(t, uds.grpc);
        fe.send(Buffer.from([0x08, 42])); // PacketType 42, no payload
        fe.send(Buffer.from([0x08, 100])); // KCTL_CREDIT is not a frontend packet either
        for (const type of ['DATA', 'CLOSE_RSP', 'DIAL_RSP', 'DRAIN', 'KCTL_PING', 'DIAL_REQ'] as const)
          fe.send({ type });
        fe.send({ type: 'CLOSE_REQ' }); // no connectID: answered
        const rsp = await fe.next('CLOSE_RSP');
        assert.equal(rsp.closeResponse?.connectID, '0');
        assert.match(rsp.closeResponse?.error ?? '', /unknown connectID 0/);
        await fe.silent(150);
        assert.equal(fe.done(), false, 'harmless packets do not end the stream (upstream ignores unknown types too)');
        // The stream is not wedged: it can still dial and carry data.
        fe.send(packets.dialReq(echo.address, '1234567'));
        const dialRsp = await fe.next('DIAL_RSP');
        assert.equal(dialRsp.dialResponse?.error ?? '', '');
        const id = dialRsp.dialResponse?.connectID ?? '';
        fe.send(packets.data(id, Buffer.from('still works')));
        assert.equal((await fe.next('DATA')).data?.data.toString(), 'still works');
        fe.send(packets.closeReq(id));
        assert.equal((await fe.next('CLOSE_RSP')).closeResponse?.connectID, id);
        await allOk('frontend unknown/payload-less packets');
      },
    );

    await t.test('frontend: unknown and foreign ids get a close or an error on the offending stream only', async () => {
      // No dial on this stream: ids of the healthy (node-1 #1) and victim (victim #1) tunnels.
      const fe = rawFrontend(t, uds.grpc);
      fe.send(packets.closeReq('1'));
      assert.match((await fe.next('CLOSE_RSP')).closeResponse?.error ?? '', /unknown connectID 1/);
      fe.send(packets.closeReq('987654321'));
      assert.match((await fe.next('CLOSE_RSP')).closeResponse?.error ?? '', /unknown connectID 987654321/);
      fe.send(packets.data('1', Buffer.from('foreign data')));
      fe.send(packets.closeRsp('1'));
      fe.send(packets.dialRsp(pendingRandom, '1'));
      fe.send(packets.dialRsp(healthy.random, '1'));
      await fe.silent(150);
      await assert.rejects(victim.next('DATA', 100), /no DATA/, 'foreign DATA never reached the victim agent');
      await allOk('foreign ids on a dial-less stream');
      // DIAL_CLS for someone else's pending dial: this stream is closed, that dial is not.
      fe.send(packets.dialCls(pendingRandom));
      assert.equal((await fe.status).code, grpc.status.OK);
      await assert.rejects(victim.next('DIAL_CLS', 150), /no DIAL_CLS/);
      await allOk('foreign DIAL_CLS');

      // DIAL_REQ reusing someone else's pending random: refused, that dial untouched.
      const dup = rawFrontend(t, uds.grpc);
      dup.send(packets.dialReq('victim:10252', pendingRandom));
      assert.match(
        (await dup.next('DIAL_RSP')).dialResponse?.error ?? '',
        /dial id 5000000000000000001 is already pending/,
      );
      assert.equal((await dup.status).code, grpc.status.OK);
      await assert.rejects(victim.next('DIAL_REQ', 150), /no DIAL_REQ/);
      await allOk('duplicate random');

      // A stream with its own tunnel: a foreign CLOSE_REQ is refused and its own tunnel stays;
      // foreign DATA closes only its own tunnel (one connection per Proxy stream).
      const own = rawFrontend(t, uds.grpc);
      own.send(packets.dialReq(echo.address, '7777777'));
      const ownId = (await own.next('DIAL_RSP')).dialResponse?.connectID ?? '';
      assert.notEqual(ownId, '1');
      own.send(packets.closeReq('1'));
      assert.match((await own.next('CLOSE_RSP')).closeResponse?.error ?? '', /unknown connectID 1/);
      own.send(packets.data(ownId, Buffer.from('own')));
      assert.equal((await own.next('DATA')).data?.data.toString(), 'own');
      own.send(packets.data('1', Buffer.from('not mine')));
      const closes = [await own.next('CLOSE_RSP'), await own.next('CLOSE_RSP')]
        .map((p) => p.closeResponse?.connectID)
        .sort();
      assert.deepEqual(closes, ['1', ownId].sort());
      assert.equal((await own.status).code, grpc.status.OK);
      await allOk('foreign ids on a stream with its own tunnel');
    });

    await t.test('frontend: an oversized frame and an undecodable message end that stream with an error', async () => {
      const fe = rawFrontend(t, uds.grpc);
      fe.send(packets.dialReq(echo.address, '8888888'));
      const id = (await fe.next('DIAL_RSP')).dialResponse?.connectID ?? '';
      await waitFor('its target is open', 10_000, () => agent.snapshot().servers[0]?.connections === 2);
      fe.send(packets.data(id, Buffer.alloc(SERVER_MAX_RECEIVE + MiB, 0x61)));
      const st = await fe.status;
      assert.equal(st.code, grpc.status.RESOURCE_EXHAUSTED, st.details);
      // Its tunnel is cleaned up on both ends; the bytes never reached the target.
      await waitFor(
        "oversized stream's tunnel gone",
        10_000,
        () => server.snapshot().establishedConnections === 2 && server.snapshot().closingConnections === 0,
      );
      await waitFor('its target closed on the agent', 10_000, () => agent.snapshot().servers[0]?.connections === 1);
      await allOk('oversized frontend frame');

      const junk = rawFrontend(t, uds.grpc);
      junk.send(Buffer.from([0xff, 0xff, 0xff, 0x07, 0x01]));
      const js = await junk.status;
      assert.equal(js.code, grpc.status.INTERNAL);
      assert.match(js.details, /deserializ/i);
      await allOk('undecodable frontend message');
    });

    await t.test(
      'garbage on the GRPC and HTTP-CONNECT unix sockets and on the agent port: connection closed or 4xx',
      async () => {
        // Not HTTP/2: the gRPC server drops the connection.
        await talk(uds.grpc, randomBytes(4096));
        await talk(uds.grpc, 'GET / HTTP/1.1\r\nHost: x\r\n\r\n');
        await talk(uds.grpc, Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), randomBytes(2048)]));
        // Not HTTP/1: 400 and closed. Wrong method: 405. Unparseable target: 400. Huge headers: 431.
        assert.match(
          await talk(uds.connect, Buffer.concat([Buffer.from([0, 1, 2, 3]), randomBytes(1024)])),
          /^HTTP\/1\.1 400 /,
        );
        assert.match(
          await talk(uds.connect, 'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'),
          /^HTTP\/1\.1 405 /,
        );
        assert.match(
          await talk(uds.connect, 'CONNECT not-an-address HTTP/1.1\r\nHost: x\r\n\r\n'),
          /^HTTP\/1\.1 400 dial address "not-an-address" is not host:port\r\n/,
        );
        assert.match(
          await talk(uds.connect, `CONNECT ${echo.address} HTTP/1.1\r\nX-Big: ${'a'.repeat(64 * 1024)}\r\n\r\n`),
          /^HTTP\/1\.1 431 /,
        );
        // Not TLS on the agent port.
        await talk(server.agentPort(), randomBytes(4096));
        await talk(server.agentPort(), 'GET / HTTP/1.1\r\nHost: x\r\n\r\n');
        await allOk('garbage on the sockets');
      },
    );

    let mallory: RawAgent;
    await t.test('agent: unknown packet type and payload-less packets are ignored; the stream stays up', async () => {
      mallory = await rawAgent(t, pki, server, {
        agentId: 'mallory',
        creds: await pki.nodeCert('mallory'),
        identifiers: 'host=mallory',
        extensions: true,
      });
      await waitFor('mallory connected', 10_000, () => server.snapshot().agents.length === 3);
      mallory.send({ type: 42 as never });
      for (const type of [
        'DATA',
        'CLOSE_RSP',
        'DIAL_RSP',
        'KCTL_CREDIT',
        'CLOSE_REQ',
        'DIAL_REQ',
        'DIAL_CLS',
        'KCTL_PONG',
      ] as const)
        mallory.send({ type });
      // Still served: a ping is answered.
      mallory.send(packets.ping('31337'));
      assert.equal((await mallory.next('KCTL_PONG')).kctlPing?.nonce, '31337');
      assert.ok(server.snapshot().agents.some((a) => a.id === 'system:node:mallory'));
      await allOk('agent unknown/payload-less packets');
    });

    await t.test('agent: unknown and foreign ids are closed on the sender, never on their owners', async () => {
      // DATA for connectID 1 (which node-1 and the victim both hold): CLOSE_REQ back to mallory.
      mallory.send(packets.data('1', Buffer.from('hijack')));
      assert.equal((await mallory.next('CLOSE_REQ')).closeRequest?.connectID, '1');
      mallory.send(packets.data('424242', Buffer.from('stray')));
      assert.equal((await mallory.next('CLOSE_REQ')).closeRequest?.connectID, '424242');
      // CLOSE_RSP for someone else's tunnel: nothing happens to it.
      mallory.send(packets.closeRsp('1', 'forged close'));
      // Credit for someone else's tunnel: ignored.
      mallory.send(packets.credit('1', 1_000_000_000));
      // DIAL_RSP for the victim's pending dial, with a connection and with an error.
      mallory.send(packets.dialRsp(pendingRandom, '7'));
      assert.equal(
        (await mallory.next('CLOSE_REQ')).closeRequest?.connectID,
        '7',
        'the stray connection is closed on the sender',
      );
      mallory.send(packets.dialRsp(pendingRandom, '0', 'forged failure'));
      // DIAL_RSP for an unknown random.
      mallory.send(packets.dialRsp('6000000000000000006', '8'));
      assert.equal((await mallory.next('CLOSE_REQ')).closeRequest?.connectID, '8');
      await assert.rejects(victim.next('CLOSE_REQ', 150), /no CLOSE_REQ/, 'the victim agent was told nothing');
      assert.equal(healthy.closeError, undefined);
      assert.equal(victimTunnel.closeError, undefined);
      await allOk('foreign ids from an agent');
    });

    await t.test('agent: an oversized frame ends that agent stream with an error; the others carry on', async () => {
      mallory.send(packets.data('1', Buffer.alloc(SERVER_MAX_RECEIVE + MiB, 0x62)));
      assert.match(await mallory.ended, /larger than|exceed|message/i);
      await waitFor(
        'mallory dropped',
        10_000,
        () => !server.snapshot().agents.some((a) => a.id === 'system:node:mallory'),
      );
      await allOk('oversized agent frame');
    });

    await t.test('an unauthenticated Connect (no certificate, no token) is refused with an error', async () => {
      await assert.rejects(
        rawAgent(t, pki, server, { agentId: 'anon', creds: null }),
        /no client certificate signed by the cluster CA and no bearer token/,
      );
      await assert.rejects(rawAgent(t, pki, server, { agentId: 'anon', creds: null, token: 'not-a-token' }), /token/i);
      assert.equal(server.snapshot().agents.length, 2);
      await allOk('unauthenticated Connect');
    });

    // ---- after all of it ----
    // The victim's pending dial completes normally, and is closed normally.
    victim.send(packets.dialRsp(pendingRandom, '2'));
    assert.equal((await pendingFe.next('DIAL_RSP')).dialResponse?.connectID, '2');
    pendingFe.send(packets.closeReq('2'));
    assert.equal((await victim.next('CLOSE_REQ')).closeRequest?.connectID, '2');
    victim.send(packets.closeRsp('2'));
    assert.equal((await pendingFe.next('CLOSE_RSP')).closeResponse?.connectID, '2');

    await echoRoundTrip(healthy, 'the end');
    const fresh = await dialViaProxy({ udsPath: uds.grpc, address: echo.address });
    await echoRoundTrip(fresh, 'a new dial');
    fresh.destroy();

    await waitFor('server tables back to baseline (healthy + victim tunnels only)', 10_000, () => {
      const s = server.snapshot();
      return (
        s.agents
          .map((a) => a.id)
          .sort()
          .join() === 'system:node:node-1,system:node:victim' &&
        s.pendingDials === 0 &&
        s.closingConnections === 0 &&
        s.establishedConnections === 2
      );
    });
    await waitFor('agent tables back to baseline', 10_000, () => {
      const s = agent.snapshot().servers[0];
      return s?.connections === 1 && s.pendingDials === 0 && echo.sockets.size === 1;
    });
    await waitFor(
      'gRPC stream gauges back to baseline',
      10_000,
      async () =>
        (await metric(server, /grpc_connections\{service_method="Proxy"\}/))?.endsWith(' 2') &&
        (await metric(server, /grpc_connections\{service_method="Connect"\}/))?.endsWith(' 2'),
    );
    assert.equal((await fetch(`http://127.0.0.1:${server.adminPort()}/readyz`)).status, 200);
  },
);
