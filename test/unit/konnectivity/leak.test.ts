// Nothing leaks (ANP#276, #255, #404): 10,000 dial/close cycles of every kind, including
// clients that give up dials, agents that die mid-dial and targets that reset, leave every
// table empty, every gauge at zero, and no file descriptor behind.
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { test } from 'node:test';
import { dialViaProxy, type ProxyTunnel } from '../../../src/konnectivity/client.ts';
import type { KonnectivityAgent } from '../../../src/konnectivity/agent/agent.ts';
import { echoServer, listen, makePki, rawAgent, readN, startAgent, startServer, udsOf } from './fixtures.ts';
import { waitFor } from '../../wait.ts';
import { freePorts } from '../../ports.ts';
import { messageOf } from '../../../src/base/errors.ts';

const CYCLES = Number(process.env.KNP_LEAK_CYCLES ?? 10_000);
const WORKERS = 32;

function openFds(): number {
  return readdirSync('/proc/self/fd').length;
}

function gauge(text: string, name: string): number {
  const lines = text.split('\n').filter((l) => l.startsWith(name) && !l.startsWith('#'));
  return lines.reduce((sum, l) => sum + Number(l.split(' ').pop()), 0);
}

/** A cycle that hangs is a bug to report, not a test timeout to guess at. */
async function withDeadline<V>(p: Promise<V>, what: string): Promise<V> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what} did not finish within 20 s`)), 20_000);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

function finished(t: ProxyTunnel): Promise<void> {
  return new Promise((resolve) => {
    t.once('close', () => resolve());
    t.once('error', () => resolve());
    t.resume();
  });
}

test(
  `${CYCLES} dial/close cycles of every kind leave no dial, tunnel, gauge or fd behind`,
  { timeout: 240_000 },
  async (t) => {
    const pki = await makePki();
    const server = await startServer(t, pki, { dialTimeoutMs: 3_000, closeTimeoutMs: 3_000 });
    const uds = udsOf(server).grpc;
    const echo = await echoServer(t);
    const reset = await listen(t, (s) => s.resetAndDestroy());
    const resetLater = await listen(t, (s) => s.once('data', () => s.resetAndDestroy()));
    const hello = await listen(t, (s) => s.end('hello'));
    // A port below the kernel's ephemeral range that nothing listens on: a port a listener of this
    // process had and closed could be handed to another test file's listener meanwhile.
    const refusedAddress = `127.0.0.1:${(await freePorts(1))[0]}`;

    const agents: KonnectivityAgent[] = [
      await startAgent(t, pki, [server], { agentId: 'kctl-agent' }),
      await startAgent(t, pki, [server], { agentId: 'plain-agent', extensions: false }),
    ];
    await waitFor('two agents', 10_000, () => server.snapshot().agents.length === 2);
    const baselineFds = openFds();

    const counts: Record<string, number> = {};
    const note = (k: string): void => {
      counts[k] = (counts[k] ?? 0) + 1;
    };
    // What a client may hear when its agent is killed under it, or its target resets.
    const allowed =
      /No agent available|disconnected|cancelled|connection refused|reset|closed the stream|timed out|stream ended after/;

    async function cycle(i: number): Promise<void> {
      const kind = i % 10;
      try {
        if (kind <= 3) {
          const tn = await dialViaProxy({ udsPath: uds, address: echo.address });
          const msg = Buffer.alloc(1 + (i % 16) * 1024, i % 251);
          tn.write(msg);
          const back = await readN(tn, msg.length);
          assert.ok(back.equals(msg));
          tn.end();
          await finished(tn);
          note('echo');
        } else if (kind === 4) {
          const ac = new AbortController();
          const p = dialViaProxy({ udsPath: uds, address: echo.address, signal: ac.signal });
          if (i % 20 < 10) ac.abort();
          else setImmediate(() => ac.abort());
          const tn = await p.catch((e: Error) => e);
          if (tn instanceof Error) note('cancelled');
          else {
            tn.destroy(); // the abort lost the race with DIAL_RSP
            note('cancel-too-late');
          }
        } else if (kind === 5) {
          const tn = await dialViaProxy({ udsPath: uds, address: echo.address });
          tn.write('x');
          tn.destroy(); // the client vanishes without CLOSE_REQ
          note('vanished');
        } else if (kind === 6) {
          // The target resets at once (the dial may fail) or once it got bytes (the tunnel ends).
          const late = i % 20 >= 10;
          const tn = await dialViaProxy({ udsPath: uds, address: late ? resetLater.address : reset.address });
          if (late) tn.write('boom');
          await finished(tn);
          note(late ? 'reset after data' : 'reset at once');
        } else if (kind === 7) {
          await assert.rejects(dialViaProxy({ udsPath: uds, address: refusedAddress }), /connection refused/);
          note('refused');
        } else {
          const tn = await dialViaProxy({ udsPath: uds, address: hello.address });
          tn.resume();
          await finished(tn);
          note('target-closed');
        }
      } catch (err) {
        const msg = messageOf(err);
        if (!allowed.test(msg)) throw err;
        note(`failed kind ${kind}`);
      }
    }

    // Agents that die mid-dial: a hand-driven agent takes dials for "black-hole" and never
    // answers, then its stream is cut; and every 2,500 cycles a real agent is stopped cold
    // with traffic in flight and replaced.
    async function blackHole(): Promise<void> {
      // Like an upstream agent: no node-name/1, so the server sends it its node's address for its name.
      const raw = await rawAgent(t, pki, server, {
        agentId: 'black-hole',
        identifiers: 'host=black-hole&ipv4=10.99.0.1',
      });
      const dials = Array.from({ length: 5 }, () =>
        dialViaProxy({ udsPath: uds, address: 'black-hole:10250' }).then(
          () => 'answered',
          (e: Error) => e.message,
        ),
      );
      // Other cycles' dials may land here too (any ready agent): they fail when it dies.
      for (let got = 0; got < 5;) if ((await raw.next('DIAL_REQ')).dialRequest?.address === '10.99.0.1:10250') got++;
      raw.close();
      for (const r of await Promise.all(dials))
        assert.match(r, /agent system:node:black-hole disconnected before answering/);
      note('agent killed mid-dial');
    }

    let next = 0;
    const started = Date.now();
    async function worker(): Promise<void> {
      while (next < CYCLES) {
        const i = next++;
        if (i > 0 && i % 1000 === 0) await blackHole();
        if (i > 0 && i % 2500 === 0) {
          const victim = agents.shift() as KonnectivityAgent;
          const id = victim.snapshot().agentId;
          await victim.stop({ drain: false });
          agents.push(await startAgent(t, pki, [server], { agentId: id, extensions: id === 'kctl-agent' }));
          note('agent restarted');
        }
        await withDeadline(cycle(i), `cycle ${i} (kind ${i % 10})`);
        if (process.env.KNP_LEAK_PROGRESS && i % 500 === 0)
          console.error(
            `cycle ${i} at ${((Date.now() - started) / 1000).toFixed(1)} s`,
            JSON.stringify(counts),
            JSON.stringify(server.snapshot().agents.map((a) => [a.id, a.connections, a.pendingDials])),
          );
      }
    }
    await Promise.all(Array.from({ length: WORKERS }, worker));
    const seconds = (Date.now() - started) / 1000;

    await waitFor('server tables empty', 15_000, () => {
      const s = server.snapshot();
      return s.pendingDials === 0 && s.establishedConnections === 0 && s.closingConnections === 0;
    });
    await waitFor('agent tables empty', 15_000, () =>
      agents.every((a) => a.snapshot().servers.every((x) => x.connections === 0 && x.pendingDials === 0)),
    );
    await waitFor(
      'target sockets closed',
      15_000,
      () => echo.sockets.size + reset.sockets.size + resetLater.sockets.size + hello.sockets.size === 0,
    );
    const metrics = await server.metrics.registry.metrics();
    assert.equal(gauge(metrics, 'konnectivity_network_proxy_server_pending_backend_dials'), 0);
    assert.equal(gauge(metrics, 'konnectivity_network_proxy_server_established_connections'), 0);
    await waitFor(
      'no Proxy streams open',
      15_000,
      async () =>
        gauge(
          await server.metrics.registry.metrics(),
          'konnectivity_network_proxy_server_grpc_connections{service_method="Proxy"}',
        ) === 0,
    );
    assert.equal(
      gauge(metrics, 'konnectivity_network_proxy_server_grpc_connections{service_method="Connect"}'),
      2,
      'only the two live agents',
    );
    assert.equal(gauge(metrics, 'konnectivity_network_proxy_server_ready_backend_connections'), 2);
    for (const a of agents)
      assert.equal(gauge(await a.metricsText(), 'konnectivity_network_proxy_agent_open_endpoint_connections'), 0);
    const fds = await waitFor('fds back to the baseline', 15_000, () => {
      const n = openFds();
      return n <= baselineFds + 2 ? n : 0;
    });
    t.diagnostic(
      `${CYCLES} cycles in ${seconds.toFixed(1)} s: ${JSON.stringify(counts)}; fds ${baselineFds} before, ${fds} after`,
    );
    assert.ok((counts.echo ?? 0) >= CYCLES * 0.3, 'most echo cycles succeeded');
    assert.equal(counts['agent killed mid-dial'], Math.floor((CYCLES - 1) / 1000));
    assert.equal(counts['agent restarted'], Math.floor((CYCLES - 1) / 2500));
  },
);
