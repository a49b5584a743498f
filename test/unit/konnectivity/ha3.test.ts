// HA with three controllers and no load balancer: every agent is given the list of all three
// agent endpoints and holds a stream to each; every server can reach every agent. One server
// is then SIGKILLed (its own process: no GOAWAY, no CLOSE packets, its sockets just vanish),
// and dials through the two that remain keep working while the agents notice the loss and the
// server count follows the live controllers (ANP#394, ANP#273, k0s#3783).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { dialViaProxy, type ProxyTunnel } from '../../../src/konnectivity/client.ts';
import type { KonnectivityAgent } from '../../../src/konnectivity/agent/agent.ts';
import type { KonnectivityServerSnapshot } from '../../../src/konnectivity/server/server.ts';
import { tempDir } from '../../helpers.ts';
import { echoServer, makePki, rawAgent, readN, startAgent, startServer, udsOf, type TestPki } from './fixtures.ts';
import { waitFor } from '../../wait.ts';

const root = new URL('../../..', import.meta.url).pathname;
type T = Parameters<typeof startServer>[0];

/** A KonnectivityServer in a child process (fixtures/child-server.ts) that the test can SIGKILL. */
async function startChildServer(t: T, pki: TestPki, serverId: string, serverCount: number) {
  const dir = await tempDir(t, 'kctl-knp-child-');
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/unit/konnectivity/fixtures/child-server.ts'], {
    cwd: root,
    env: {
      ...process.env,
      KNP_DIR: dir,
      KNP_ID: serverId,
      KNP_COUNT: String(serverCount),
      KNP_CA: pki.ca,
      KNP_CERT: pki.serverCert,
      KNP_KEY: pki.serverKey,
    },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const exited = once(child, 'exit');
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited;
    }
  });
  const lines: string[] = [];
  const waiters: (() => void)[] = [];
  createInterface({ input: child.stdout }).on('line', (l) => {
    lines.push(l);
    for (const w of waiters.splice(0)) w();
  });
  const nextLine = (): Promise<string> => waitFor(`a line from child server ${serverId}`, 20_000, () => lines.shift());
  const hello = JSON.parse(await nextLine()) as { agentPort: number; uds: string };
  return {
    serverId,
    agentPort: hello.agentPort,
    uds: hello.uds,
    async snapshot(): Promise<KonnectivityServerSnapshot> {
      child.stdin.write('\n');
      return JSON.parse(await nextLine()) as KonnectivityServerSnapshot;
    },
    async kill(): Promise<void> {
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/** One dial through the server's GRPC frontend to the echo target; `size` bytes must come back. */
async function echoVia(uds: string, address: string, size = 64): Promise<void> {
  const tn = await dialViaProxy({ udsPath: uds, address });
  try {
    const msg = randomBytes(size);
    tn.write(msg);
    assert.ok((await readN(tn, size)).equals(msg), 'echoed bytes differ');
  } finally {
    tn.destroy();
  }
}

/** An open tunnel that echoes on demand. */
async function roundTrip(tn: ProxyTunnel, what: string): Promise<void> {
  const msg = Buffer.from(`${what} ${randomBytes(6).toString('hex')}`);
  tn.write(msg);
  const back = readN(tn, msg.length);
  tn.resume(); // readN leaves the stream explicitly paused; a new 'data' listener alone does not resume it
  assert.equal((await back).toString(), msg.toString(), what);
}

const ids = (a: KonnectivityAgent): string[] =>
  a
    .snapshot()
    .servers.map((s) => s.serverId)
    .sort();
const agentIds = (s: KonnectivityServerSnapshot): string[] => s.agents.map((a) => a.id).sort();

test(
  '3 servers, 2 agents given all 3 addresses: all connected to all; SIGKILL one server and dials keep working',
  { timeout: 30_000 },
  async (t) => {
    const pki = await makePki();
    let live = 3;
    const s1 = await startServer(t, pki, { serverId: 'ctrl-1', serverCount: () => live });
    const s2 = await startServer(t, pki, { serverId: 'ctrl-2', serverCount: () => live });
    const s3 = await startChildServer(t, pki, 'ctrl-3', 3);
    const addresses = [s1.agentPort(), s2.agentPort(), s3.agentPort].map((port) => ({ host: '127.0.0.1', port }));
    const agents = [
      await startAgent(t, pki, addresses, { agentId: 'node-1' }),
      await startAgent(t, pki, addresses, { agentId: 'node-2' }),
    ];
    const echo = await echoServer(t);
    const uds = { 'ctrl-1': udsOf(s1).grpc, 'ctrl-2': udsOf(s2).grpc, 'ctrl-3': s3.uds };

    // ---- all connected to all ----
    for (const a of agents) {
      await waitFor(
        `${a.snapshot().agentId} holds all 3 servers`,
        15_000,
        () => ids(a).join() === 'ctrl-1,ctrl-2,ctrl-3',
      );
      assert.equal(a.snapshot().knownServerCount, 3);
      for (const s of a.snapshot().servers) assert.equal(s.serverCount, 3);
    }
    await waitFor(
      'every server sees both agents (no duplicates)',
      10_000,
      async () =>
        agentIds(s1.snapshot()).join() === 'system:node:node-1,system:node:node-2' &&
        agentIds(s2.snapshot()).join() === 'system:node:node-1,system:node:node-2' &&
        agentIds(await s3.snapshot()).join() === 'system:node:node-1,system:node:node-2',
    );
    assert.equal(s1.snapshot().serverCount, 3);

    // ---- dials through every server's GRPC frontend ----
    for (const path of Object.values(uds)) {
      for (let i = 0; i < 4; i++) await echoVia(path, echo.address);
    }
    // One long-lived tunnel through each server, open across the kill.
    const held = {
      'ctrl-1': await dialViaProxy({ udsPath: uds['ctrl-1'], address: echo.address }),
      'ctrl-2': await dialViaProxy({ udsPath: uds['ctrl-2'], address: echo.address }),
      'ctrl-3': await dialViaProxy({ udsPath: uds['ctrl-3'], address: echo.address }),
    };
    t.after(() => {
      for (const tn of Object.values(held)) tn.destroy();
    });
    for (const [id, tn] of Object.entries(held)) await roundTrip(tn, `before kill via ${id}`);
    await waitFor(
      '3 held targets on the agents',
      10_000,
      () => agents.reduce((n, a) => n + a.targetStats().length, 0) === 3,
    );

    // ---- SIGKILL ctrl-3 ----
    live = 2;
    const killedAt = Date.now();
    await s3.kill();

    // Dials through the survivors work right away, while the agents are still resyncing.
    const burst = await Promise.allSettled(
      Array.from({ length: 12 }, (_, i) => echoVia(i % 2 ? uds['ctrl-1'] : uds['ctrl-2'], echo.address)),
    );
    const failed = burst.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason));
    assert.deepEqual(failed, [], "dials through the surviving servers during the agents' resync");

    // The tunnel through the dead server ends; the ones through the survivors carry on.
    held['ctrl-3'].resume();
    await waitFor(
      'tunnel through ctrl-3 ended',
      10_000,
      () => held['ctrl-3'].readableEnded || held['ctrl-3'].destroyed,
    );
    await roundTrip(held['ctrl-1'], 'after kill via ctrl-1');
    await roundTrip(held['ctrl-2'], 'after kill via ctrl-2');

    // The agents notice the loss (a closed TCP connection: no keepalive timeout involved) and
    // drop the target connection made for the dead server.
    for (const a of agents) {
      await waitFor(`${a.snapshot().agentId} dropped ctrl-3`, 10_000, () => ids(a).join() === 'ctrl-1,ctrl-2');
    }
    assert.ok(Date.now() - killedAt < 10_000, 'noticed in seconds');
    await waitFor('no target left for ctrl-3', 10_000, () =>
      agents.every((a) => a.targetStats().every((s) => s.serverId !== 'ctrl-3')),
    );
    await waitFor('the echo target sees only the 2 held connections', 10_000, () => echo.sockets.size === 2);

    // The server count follows the live controllers: the survivors report 2, and the agents
    // (which look for more servers while they hold fewer than they know of) learn it.
    assert.equal(s1.snapshot().serverCount, 2);
    assert.equal(s2.snapshot().serverCount, 2);
    for (const a of agents) {
      await waitFor(
        `${a.snapshot().agentId} knownServerCount follows to 2`,
        10_000,
        () => a.snapshot().knownServerCount === 2,
      );
    }
    // ...and no duplicate streams are left behind on the survivors.
    await waitFor(
      'each survivor sees both agents once',
      10_000,
      () =>
        agentIds(s1.snapshot()).join() === 'system:node:node-1,system:node:node-2' &&
        agentIds(s2.snapshot()).join() === 'system:node:node-1,system:node:node-2',
    );

    // A dial to the dead server's socket fails fast instead of hanging.
    const t0 = Date.now();
    await assert.rejects(dialViaProxy({ udsPath: uds['ctrl-3'], address: echo.address }));
    assert.ok(Date.now() - t0 < 5_000, 'a dead frontend socket fails fast');

    // Several more dials through each survivor, small and larger than a flow-control window.
    for (const path of [uds['ctrl-1'], uds['ctrl-2']]) {
      for (let i = 0; i < 4; i++) await echoVia(path, echo.address);
      await echoVia(path, echo.address, 600 * 1024);
    }

    // A fresh Connect to a survivor is told servercount=2.
    const probe = await rawAgent(t, pki, s1, { agentId: 'probe', creds: await pki.nodeCert('probe') });
    assert.deepEqual(probe.headers.get('servercount'), ['2']);
    probe.close();

    // Tables return to what is really open: the two held tunnels, nothing pending or closing.
    await waitFor('survivor tables settle', 10_000, () =>
      [s1, s2].every((s) => {
        const snap = s.snapshot();
        return (
          snap.pendingDials === 0 &&
          snap.closingConnections === 0 &&
          snap.establishedConnections === 1 &&
          snap.agents.length === 2
        );
      }),
    );
    await waitFor(
      'agent tables settle',
      10_000,
      () =>
        agents.every((a) => a.snapshot().servers.every((s) => s.pendingDials === 0)) &&
        agents.reduce((n, a) => n + a.targetStats().length, 0) === 2,
    );
  },
);
