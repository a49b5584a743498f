// Head-of-line blocking (ANP#180, #881, KKP#13321): one tunneled connection whose reader has
// stopped must not slow the others, and must not make anything buffer without limit.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import type { Socket } from 'node:net';
import { test } from 'node:test';
import { dialViaProxy, type ProxyTunnel } from '../../../src/konnectivity/client.ts';
import { INITIAL_WINDOW, MAX_DATA_CHUNK, MAX_WINDOW } from '../../../src/konnectivity/wire/protocol.ts';
import type { KonnectivityServer } from '../../../src/konnectivity/server/server.ts';
import { echoServer, listen, makePki, readN, startAgent, startServer, udsOf } from './fixtures.ts';
import { waitFor } from '../../wait.ts';

const MiB = 1024 * 1024;

/** A target that sends N bytes (or forever) after reading "N\n" / "inf\n", honouring backpressure. */
async function sourceServer(t: Parameters<typeof listen>[0], host = '127.0.0.1') {
  const accepted = new Map<Socket, number>();
  const endless = new Set<Socket>();
  const chunk = Buffer.alloc(64 * 1024, 0x5a);
  const srv = await listen(
    t,
    (s) => {
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
    },
    host,
  );
  return { ...srv, accepted, endless };
}

interface Group {
  tunnels: ProxyTunnel[];
  received: number;
  done: Promise<void>;
}

/** `conns` connections that will each download `size` bytes once started. */
async function healthyGroup(server: KonnectivityServer, address: string, conns: number): Promise<Group> {
  const tunnels = await Promise.all(
    Array.from({ length: conns }, () => dialViaProxy({ udsPath: udsOf(server).grpc, address })),
  );
  const g: Group = { tunnels, received: 0, done: Promise.resolve() };
  g.done = Promise.all(
    tunnels.map(
      (tn) =>
        new Promise<void>((resolve, reject) => {
          tn.on('data', (c: Buffer) => (g.received += c.length));
          tn.once('end', resolve);
          tn.once('error', reject);
        }),
    ),
  ).then(() => undefined);
  return g;
}

test('one stalled reader does not slow 100 other connections on the same agent, and stays bounded', async (t) => {
  // Two agents, each with 100 healthy downloads running at the same time; one of them also
  // carries a connection whose reader has stopped. Both groups share the host's noise (other
  // work on a shared 2-core machine), so comparing them over the same time window measures
  // the stalled connection's effect and nothing else. Roles swap every round.
  const pki = await makePki();
  const server = await startServer(t, pki);
  const sides = [
    {
      ip: '127.0.0.2',
      agent: await startAgent(t, pki, [server], { agentId: 'node-a', identifiers: { ipv4: ['127.0.0.2'] } }),
    },
    {
      ip: '127.0.0.3',
      agent: await startAgent(t, pki, [server], { agentId: 'node-b', identifiers: { ipv4: ['127.0.0.3'] } }),
    },
  ];
  await waitFor('agents', 10_000, () => server.snapshot().agents.length === 2);
  const sources = [await sourceServer(t, sides[0]!.ip), await sourceServer(t, sides[1]!.ip)];
  const CONNS = 100;
  const SIZE = 2 * MiB;

  const stall = async (address: string): Promise<ProxyTunnel> => {
    const tunnel = await dialViaProxy({ udsPath: udsOf(server).grpc, address });
    tunnel.pause(); // the reader stops; nothing consumes this tunnel from now on
    tunnel.write('inf\n');
    // Saturated: the server holds the window for it and the agent has stopped reading.
    await waitFor('stalled connection saturated', 10_000, () => {
      const s = server.tunnelStats().find((x) => x.random === tunnel.random);
      return s !== undefined && s.unflushed >= INITIAL_WINDOW / 2;
    });
    return tunnel;
  };

  const ratios: number[] = [];
  const rates: string[] = [];
  const peaks: { server: number; agentHeld: number; sourceAccepted: number }[] = [];
  for (let round = 0; round < 4; round++) {
    const s = round % 2; // the side with the stalled connection
    const u = 1 - s;
    const stalled = await stall(sources[s]!.address);
    const groups = [
      await healthyGroup(server, sources[0]!.address, CONNS),
      await healthyGroup(server, sources[1]!.address, CONNS),
    ];
    const started = process.hrtime.bigint();
    for (const g of groups) for (const tn of g.tunnels) tn.write(`${SIZE}\n`);
    // Over the same window: until the first group has everything.
    await Promise.race(groups.map((g) => g.done));
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    const [withStall, without] = [groups[s]!.received, groups[u]!.received];
    ratios.push(withStall / without);
    rates.push(`${(withStall / MiB / seconds).toFixed(0)} vs ${(without / MiB / seconds).toFixed(0)}`);
    await Promise.all(groups.map((g) => g.done));
    assert.ok(
      groups.every((g) => g.received === CONNS * SIZE),
      'every healthy connection got all its bytes',
    );

    // Still stalled, still bounded, after 400 MiB went past it.
    const st = server.tunnelStats().find((x) => x.random === stalled.random);
    const at = sides[s]!.agent.targetStats().find((x) => x.connectID === stalled.connectID);
    assert.ok(st && at, 'the stalled connection is still open');
    const sock = Math.max(
      0,
      ...[...sources[s]!.endless].filter((k) => !k.destroyed).map((k) => sources[s]!.accepted.get(k) ?? 0),
    );
    peaks.push({ server: st.peakUnflushed, agentHeld: at.peakHeld, sourceAccepted: sock });
    stalled.destroy();
    await waitFor(
      'stalled connection closed',
      10_000,
      () =>
        !server.tunnelStats().some((x) => x.random === stalled.random) && sides[s]!.agent.targetStats().length === 0,
    );
  }
  // Geometric mean over rounds with the roles swapped: any difference between the two agents
  // themselves cancels out.
  const ratio = Math.exp(ratios.reduce((a, r) => a + Math.log(r), 0) / ratios.length);
  t.diagnostic(
    `MiB/s of 100 healthy connections, with a stalled one on their agent vs without: ${rates.join('; ')}; ratios ${ratios.map((r) => r.toFixed(3)).join(', ')}; overall ${ratio.toFixed(3)}`,
  );
  t.diagnostic(
    `stalled connection: server buffered at most ${peaks.map((p) => p.server).join(', ')} B, agent held at most ${peaks.map((p) => p.agentHeld).join(', ')} B, target wrote ${peaks.map((p) => (p.sourceAccepted / MiB).toFixed(1)).join(', ')} MiB (kernel socket buffers included)`,
  );
  assert.ok(ratio >= 0.9, `healthy connections kept ${(ratio * 100).toFixed(1)}% of their throughput (need >= 90%)`);
  for (const p of peaks) {
    // The stalled reader's client and kernel buffers took the first bytes as fast as they came,
    // so its window may have grown before it stalled: bounded by the largest window.
    assert.ok(
      p.server <= MAX_WINDOW,
      `server buffered ${p.server} B for the stalled connection (max window ${MAX_WINDOW})`,
    );
    assert.ok(p.agentHeld <= MAX_DATA_CHUNK, `agent held ${p.agentHeld} B (one read at most)`);
    assert.ok(
      p.sourceAccepted < 32 * MiB,
      `the stalled target could push only ${p.sourceAccepted} B before backpressure reached it`,
    );
  }
  // Window growth is returned when the connections close: the next ones can grow again.
  await waitFor(
    'window growth returned',
    10_000,
    () => server.windowGrowthInUse() === 0 && sides.every((x) => x.agent.windowGrowthInUse() === 0),
  );
});

test('a target that stops reading backpressures its client, and the agent buffers at most a window', async (t) => {
  const pki = await makePki();
  const server = await startServer(t, pki);
  const agent = await startAgent(t, pki, [server]);
  await waitFor('agent', 10_000, () => server.snapshot().agents.length === 1);
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
  t.diagnostic(
    `client offered ${(written / MiB).toFixed(1)} MiB, ${(passed / MiB).toFixed(1)} MiB left it (kernel socket buffers included); agent unflushed peak ${at.peakUnflushed} B; server held peak ${st.peakHeld} B`,
  );
  assert.ok(
    at.peakUnflushed <= MAX_WINDOW,
    `agent buffered ${at.peakUnflushed} B towards the stalled target (max window ${MAX_WINDOW})`,
  );
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
  await waitFor('agent', 10_000, () => server.snapshot().agents[0]?.extensions.length === 0);
  const source = await sourceServer(t);
  const echo = await echoServer(t);

  const stalled = await dialViaProxy({ udsPath: udsOf(server).grpc, address: source.address });
  stalled.pause();
  stalled.write('inf\n');
  await waitFor(
    'stalled connection closed by the server',
    10_000,
    () => !server.tunnelStats().some((x) => x.connectID === stalled.connectID),
  );
  const other = await dialViaProxy({ udsPath: udsOf(server).grpc, address: echo.address });
  other.write('fine');
  assert.equal((await readN(other, 4)).toString(), 'fine');
  other.destroy();
  // The stalled client, once it reads again, learns why.
  stalled.resume();
  await once(stalled, 'end');
  assert.match(stalled.closeError ?? '', /client is not reading: more than 1048576 bytes buffered/);
});
