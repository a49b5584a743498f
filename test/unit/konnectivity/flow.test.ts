// Head-of-line blocking (ANP#180, #881, KKP#13321): one tunneled connection whose reader has
// stopped must not slow the others, and must not make anything buffer without limit.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import type { Socket } from 'node:net';
import { test } from 'node:test';
import { dialViaProxy, type ProxyTunnel } from '../../../src/konnectivity/client.ts';
import { INITIAL_WINDOW, MAX_DATA_CHUNK } from '../../../src/konnectivity/protocol.ts';
import type { KonnectivityServer } from '../../../src/konnectivity/server.ts';
import { echoServer, listen, makePki, readN, startAgent, startServer, udsOf, waitFor } from './fixtures.ts';

const MiB = 1024 * 1024;

/** A target that sends N bytes (or forever) after reading "N\n" / "inf\n", honouring backpressure. */
async function sourceServer(t: Parameters<typeof listen>[0]) {
  const accepted = new Map<Socket, number>();
  const endless = new Set<Socket>();
  const chunk = Buffer.alloc(64 * 1024, 0x5a);
  const srv = await listen(t, (s) => {
    let line = '';
    const onData = (c: Buffer): void => {
      line += c.toString();
      if (!line.includes('\n')) return;
      s.off('data', onData);
      const n = line.startsWith('inf') ? Number.POSITIVE_INFINITY : Number(line.trim());
      if (!Number.isFinite(n)) endless.add(s);
      let sent = 0;
      accepted.set(s, 0);
      const pump = (): void => {
        while (sent < n && !s.destroyed) {
          const len = Math.min(chunk.length, n - sent);
          sent += len;
          accepted.set(s, sent);
          if (!s.write(len === chunk.length ? chunk : chunk.subarray(0, len))) {
            s.once('drain', pump);
            return;
          }
        }
        if (Number.isFinite(n)) s.end();
      };
      pump();
    };
    s.on('data', onData);
  });
  return { ...srv, accepted, endless };
}

/** Reads a tunnel to its end; resolves with the byte count. */
function drainCount(tunnel: ProxyTunnel): Promise<number> {
  return new Promise((resolve, reject) => {
    let n = 0;
    tunnel.on('data', (c: Buffer) => (n += c.length));
    tunnel.once('end', () => resolve(n));
    tunnel.once('error', reject);
  });
}

/** 100 connections each download `size` bytes at once; MiB/s over all of them. */
async function healthyThroughput(server: KonnectivityServer, address: string, conns: number, size: number): Promise<number> {
  const tunnels = await Promise.all(Array.from({ length: conns }, () => dialViaProxy({ udsPath: udsOf(server).grpc, address })));
  const started = process.hrtime.bigint();
  const done = tunnels.map((tn) => {
    const counted = drainCount(tn);
    tn.write(`${size}\n`);
    return counted;
  });
  const got = await Promise.all(done);
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  assert.ok(got.every((n) => n === size), 'every healthy connection got all its bytes');
  return (conns * size) / MiB / seconds;
}

test('one stalled reader does not slow 100 other connections on the same agent, and stays bounded', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki);
  const agent = await startAgent(t, pki, [server]);
  await waitFor('agent', () => server.snapshot().agents.length === 1);
  const source = await sourceServer(t);
  const CONNS = 100;
  const SIZE = 2 * MiB;

  const stall = async (): Promise<{ tunnel: ProxyTunnel; connectID: string }> => {
    const tunnel = await dialViaProxy({ udsPath: udsOf(server).grpc, address: source.address });
    tunnel.pause(); // the reader stops; nothing consumes this tunnel from now on
    tunnel.write('inf\n');
    // Saturated: the server holds the window for it and the agent has stopped reading.
    await waitFor('stalled connection saturated', () => {
      const s = server.tunnelStats().find((x) => x.connectID === tunnel.connectID);
      return s !== undefined && s.unflushed >= INITIAL_WINDOW / 2;
    });
    return { tunnel, connectID: tunnel.connectID };
  };

  await healthyThroughput(server, source.address, CONNS, SIZE / 4); // warm-up (JIT, buffers)
  const base: number[] = [];
  const stalled: number[] = [];
  const peaks: { server: number; agentHeld: number; sourceAccepted: number }[] = [];
  // Alternate, and compare the best run of each kind: other work on a shared 2-core host only
  // ever slows a run down, so the best run is the one least disturbed.
  for (let round = 0; round < 3; round++) {
    base.push(await healthyThroughput(server, source.address, CONNS, SIZE));
    const s = await stall();
    stalled.push(await healthyThroughput(server, source.address, CONNS, SIZE));
    // Still stalled, still bounded, after 200 MiB went past it.
    const st = server.tunnelStats().find((x) => x.connectID === s.connectID);
    const at = agent.targetStats().find((x) => x.connectID === s.connectID);
    assert.ok(st && at, 'the stalled connection is still open');
    const sock = Math.max(0, ...[...source.endless].filter((k) => !k.destroyed).map((k) => source.accepted.get(k) ?? 0));
    peaks.push({ server: st.peakUnflushed, agentHeld: at.peakHeld, sourceAccepted: sock });
    s.tunnel.destroy();
    await waitFor('stalled connection closed', () => !server.tunnelStats().some((x) => x.connectID === s.connectID) && !agent.targetStats().some((x) => x.connectID === s.connectID));
  }
  const ratio = Math.max(...stalled) / Math.max(...base);
  t.diagnostic(`healthy MiB/s without stall ${base.map((v) => v.toFixed(0)).join(', ')}; with one stalled reader ${stalled.map((v) => v.toFixed(0)).join(', ')}; ratio ${ratio.toFixed(3)}`);
  t.diagnostic(`stalled connection: server buffered at most ${peaks.map((p) => p.server).join(', ')} B, agent held at most ${peaks.map((p) => p.agentHeld).join(', ')} B, target wrote ${peaks.map((p) => (p.sourceAccepted / MiB).toFixed(1)).join(', ')} MiB (kernel socket buffers included)`);
  assert.ok(ratio >= 0.9, `healthy connections kept ${(ratio * 100).toFixed(1)}% of their throughput (need >= 90%)`);
  for (const p of peaks) {
    assert.ok(p.server <= INITIAL_WINDOW, `server buffered ${p.server} B for the stalled connection (window ${INITIAL_WINDOW})`);
    assert.ok(p.agentHeld <= MAX_DATA_CHUNK, `agent held ${p.agentHeld} B (one read at most)`);
    assert.ok(p.sourceAccepted < 32 * MiB, `the stalled target could push only ${p.sourceAccepted} B before backpressure reached it`);
  }
});

test('a target that stops reading backpressures its client, and the agent buffers at most a window', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki);
  const agent = await startAgent(t, pki, [server]);
  await waitFor('agent', () => server.snapshot().agents.length === 1);
  const sink = await listen(t, (s) => s.pause()); // accepts, never reads
  const echo = await echoServer(t);

  const tunnel = await dialViaProxy({ udsPath: udsOf(server).grpc, address: sink.address });
  const block = Buffer.alloc(64 * 1024, 1);
  let written = 0;
  // Write until the tunnel says stop, then keep offering more on every drain for a while.
  const deadline = Date.now() + 1500;
  while (Date.now() < deadline) {
    written += block.length;
    if (!tunnel.write(block)) await Promise.race([once(tunnel, 'drain'), new Promise((r) => setTimeout(r, 200))]);
  }
  const at = agent.targetStats().find((x) => x.connectID === tunnel.connectID);
  const st = server.tunnelStats().find((x) => x.connectID === tunnel.connectID);
  assert.ok(at && st);
  const passed = written - tunnel.writableLength; // what left the client, not what waits in it
  t.diagnostic(`client offered ${(written / MiB).toFixed(1)} MiB, ${(passed / MiB).toFixed(1)} MiB left it (kernel socket buffers included); agent unflushed peak ${at.peakUnflushed} B; server held peak ${st.peakHeld} B`);
  assert.ok(at.peakUnflushed <= INITIAL_WINDOW, `agent buffered ${at.peakUnflushed} B towards the stalled target`);
  assert.ok(st.peakHeld <= MAX_DATA_CHUNK, `server held ${st.peakHeld} B beyond the credit`);
  assert.ok(passed < 16 * MiB, `the client was slowed down (${passed} B left it)`);

  // Meanwhile another connection on the same agent works.
  const other = await dialViaProxy({ udsPath: udsOf(server).grpc, address: echo.address });
  other.write('still alive');
  assert.equal((await readN(other, 11)).toString(), 'still alive');
  other.destroy();
  tunnel.destroy();
});

test('with an agent that has no flow control (upstream), a stalled reader loses only its own connection', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki, { upstreamBufferLimit: 1 * MiB });
  await startAgent(t, pki, [server], { extensions: false });
  await waitFor('agent', () => server.snapshot().agents[0]?.extensions.length === 0);
  const source = await sourceServer(t);
  const echo = await echoServer(t);

  const stalled = await dialViaProxy({ udsPath: udsOf(server).grpc, address: source.address });
  stalled.pause();
  stalled.write('inf\n');
  await waitFor('stalled connection closed by the server', () => !server.tunnelStats().some((x) => x.connectID === stalled.connectID));
  const other = await dialViaProxy({ udsPath: udsOf(server).grpc, address: echo.address });
  other.write('fine');
  assert.equal((await readN(other, 4)).toString(), 'fine');
  other.destroy();
  // The stalled client, once it reads again, learns why.
  stalled.resume();
  await once(stalled, 'end');
  assert.match(stalled.closeError ?? '', /client is not reading: more than 1048576 bytes buffered/);
});
