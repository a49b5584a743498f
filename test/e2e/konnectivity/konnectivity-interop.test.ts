// Interoperability with upstream apiserver-network-proxy v0.36 (built into the component
// payload for exactly this): an upstream proxy-agent serves through the kctl server, and a kctl
// agent serves through an upstream proxy-server. Real bytes both ways, with our ProxyService
// client and with upstream's proxy-test-client, in GRPC and HTTP-CONNECT modes.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { createServer as createHttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa, type ResultPromise } from 'execa';
import { dialViaProxy } from '../../../src/konnectivity/client.ts';
import { KonnectivityAgent } from '../../../src/konnectivity/agent/agent.ts';
import { tempDir } from '../../helpers.ts';
import { freePort } from '../../ports.ts';
import { upstreamBin } from '../lab/upstream.ts';
import {
  echoServer,
  FakeNodes,
  makePki,
  quietLogger,
  readN,
  startAgent,
  startServer,
  udsOf,
} from '../../unit/konnectivity/fixtures.ts';
import { waitFor } from '../../wait.ts';

type T = { after: (fn: () => Promise<void> | void) => void };
/** Starts an upstream binary; its output is kept for failure messages; killed after the test. */
function run(t: T, bin: string, args: string[]): { proc: ResultPromise; output: () => string } {
  const proc = execa(bin, args, { reject: false, all: true, stdin: 'ignore' });
  let out = '';
  proc.all?.on('data', (c: Buffer) => (out += c.toString()));
  t.after(async () => {
    proc.kill('SIGKILL');
    await proc;
  });
  return { proc, output: () => out };
}

/** An HTTP target for proxy-test-client: GET /success answers "success". */
async function httpTarget(t: T): Promise<number> {
  const srv = createHttpServer((req, res) => {
    res.writeHead(req.url === '/success' ? 200 : 404, { 'Content-Type': 'text/plain' });
    res.end(req.url === '/success' ? 'success' : 'not found');
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  t.after(
    () =>
      new Promise<void>((r) => {
        srv.closeAllConnections();
        srv.close(() => r());
      }),
  );
  return (srv.address() as AddressInfo).port;
}

async function echoRoundTrip(udsPath: string, address: string, bytes: number): Promise<void> {
  const tn = await dialViaProxy({ udsPath, address });
  const payload = Buffer.alloc(bytes);
  for (let i = 0; i < bytes; i++) payload[i] = (i * 7919) & 0xff;
  tn.write(payload);
  assert.ok((await readN(tn, bytes)).equals(payload), 'echoed bytes differ');
  tn.destroy();
}

async function testClient(t: { diagnostic(m: string): void }, bin: string, args: string[]): Promise<void> {
  const r = await execa(
    bin,
    ['--test-requests', '1', '--request-host', '127.0.0.1', '--request-path', 'success', ...args],
    {
      reject: false,
      all: true,
      timeout: 60_000,
      // proxy-test-client closes its proxy connection on any signal it receives (signal.Notify with no
      // list), and Go's runtime signals itself (SIGURG) to preempt a busy goroutine: on a loaded
      // machine a CONNECT failed with "use of closed network connection". No async preemption, no SIGURG.
      env: { GODEBUG: 'asyncpreemptoff=1' },
    },
  );
  assert.equal(r.exitCode, 0, `proxy-test-client ${args.join(' ')} failed:\n${r.all}`);
  assert.match(String(r.all), /success/, `proxy-test-client did not print the response:\n${r.all}`);
  t.diagnostic(
    `proxy-test-client ${args[1]}: ${String(r.all)
      .split('\n')
      .filter((l) => /success/.test(l))
      .pop()
      ?.slice(0, 160)}`,
  );
}

test(
  'upstream proxy-agent -> kctl server: GRPC and HTTP-CONNECT frontends carry real bytes',
  { timeout: 180_000 },
  async (t) => {
    const bin = upstreamBin();
    const pki = await makePki();
    const dir = await tempDir(t, 'kctl-interop-');
    const node = await pki.nodeCert('upstream-node');
    await Promise.all([
      writeFile(join(dir, 'ca.crt'), pki.ca),
      writeFile(join(dir, 'node.crt'), node.cert),
      writeFile(join(dir, 'node.key'), node.key, { mode: 0o600 }),
    ]);
    // Nodes as the controller's watch would report them: each agent may claim only its own.
    const nodes = new FakeNodes();
    nodes.set('upstream-node', '127.0.0.1');
    nodes.set('kctl-node', '127.0.0.2');
    nodes.set('other-node', '127.0.0.9');
    const server = await startServer(t, pki, { serverId: 'kctl-1', upstreamBufferLimit: 1024 * 1024, nodes });
    const agent = run(t, bin['proxy-agent'], [
      '--proxy-server-host',
      '127.0.0.1',
      '--proxy-server-port',
      String(server.agentPort()),
      '--ca-cert',
      join(dir, 'ca.crt'),
      '--agent-cert',
      join(dir, 'node.crt'),
      '--agent-key',
      join(dir, 'node.key'),
      '--agent-id',
      'upstream-node',
      '--agent-identifiers',
      'host=upstream-node&host=other-node&ipv4=127.0.0.1&ipv4=127.0.0.9&cidr=127.0.0.0/8&default-route=true',
      '--health-server-host',
      '127.0.0.1',
      '--health-server-port',
      String(await freePort()),
      '--admin-server-port',
      String(await freePort()),
      '--sync-interval',
      '200ms',
    ]);
    const seen = await waitFor('upstream agent connected', 60_000, () => server.snapshot().agents[0]).catch(
      (err: Error) => {
        throw new Error(`${err.message}\n${agent.output()}`);
      },
    );
    assert.equal(seen.id, 'system:node:upstream-node', 'an agent is its certificate');
    assert.equal(seen.node, 'upstream-node');
    assert.deepEqual(seen.extensions, [], 'an upstream agent does not negotiate kctl extensions');

    // The claim rules treat an upstream agent with a node certificate exactly as a kctl agent.
    const twin = await startAgent(t, pki, [server], {
      agentId: 'kctl-node',
      identifiers: {
        host: ['kctl-node', 'other-node'],
        ipv4: ['127.0.0.2', '127.0.0.9'],
        cidr: ['127.0.0.0/8'],
        defaultRoute: true,
      },
    });
    const kctlSeen = await waitFor('kctl agent connected', 10_000, () =>
      server.snapshot().agents.find((a) => a.id === 'system:node:kctl-node'),
    );
    assert.deepEqual(seen.accepted, {
      host: ['upstream-node'],
      ipv4: ['127.0.0.1'],
      ipv6: [],
      cidr: [],
      defaultRoute: false,
    });
    assert.deepEqual(kctlSeen.accepted, {
      host: ['kctl-node'],
      ipv4: ['127.0.0.2'],
      ipv6: [],
      cidr: [],
      defaultRoute: false,
    });
    assert.deepEqual(seen.dropped, kctlSeen.dropped);
    assert.deepEqual(
      seen.dropped.map((d) => d.claim),
      ['cidr=127.0.0.0/8', 'default-route=true', 'host=other-node', 'ipv4=127.0.0.9'],
    );
    await twin.stop({ drain: false });
    await waitFor('kctl agent gone', 10_000, () => server.snapshot().agents.length === 1);

    const uds = udsOf(server);
    const echo = await echoServer(t);
    // No more than the 1 MiB upstream buffer limit in one round trip: an upstream agent cannot be
    // slowed down per connection, so more than that could overflow the buffer towards this test's
    // own client whenever the machine is busy, which is the stalled-reader case below, not this one.
    await echoRoundTrip(uds.grpc, echo.address, 1024 * 1024 - 3);
    await assert.rejects(dialViaProxy({ udsPath: uds.grpc, address: '127.0.0.1:1' }), /connection refused/);

    const http = await httpTarget(t);
    await testClient(t, bin['proxy-test-client'], [
      '--mode',
      'grpc',
      '--proxy-uds',
      uds.grpc,
      '--proxy-host',
      '',
      '--proxy-port',
      '0',
      '--request-port',
      String(http),
    ]);
    await testClient(t, bin['proxy-test-client'], [
      '--mode',
      'http-connect',
      '--proxy-uds',
      uds.connect,
      '--proxy-host',
      '',
      '--proxy-port',
      '0',
      '--request-port',
      String(http),
    ]);

    // A client that stops reading loses only its own connection, with the reason (the upstream
    // agent cannot be flow-controlled); the agent and other connections carry on.
    // The server buffers only what the path to the client does not take first, and that is no fixed
    // amount: the client's HTTP/2 window (1 MiB), its socket, and the 16 messages grpc-js queues for a
    // paused call, each as large as the server coalesced in one I/O turn (up to 1 MiB). 2-3.5 MiB were
    // measured; a busy machine coalesces more. So write until the cut instead of a fixed 4 MiB
    // (which a busy run never cut); the byte bound only stops a server that never cuts.
    const flood = await echoServer(t);
    const stalled = await dialViaProxy({ udsPath: uds.grpc, address: flood.address });
    stalled.pause();
    const block = Buffer.alloc(64 * 1024, 1);
    let written = 0;
    while (server.tunnelStats().some((x) => x.connectID === stalled.connectID)) {
      assert.ok(
        written < 64 * 1024 * 1024,
        `a client that stopped reading was not cut after ${written} bytes echoed towards it`,
      );
      while (stalled.writableLength < 1024 * 1024) {
        stalled.write(block);
        written += block.length;
      }
      await sleep(20);
    }
    t.diagnostic(`stalled reader cut after ${written} bytes written`);
    // The CLOSE_RSP with the reason comes behind the bytes already on their way to the client.
    stalled.resume();
    await waitFor('stalled client read to its end', 60_000, () => stalled.readableEnded);
    assert.match(String(stalled.closeError), /^client is not reading: more than 1048576 bytes buffered/);
    await echoRoundTrip(uds.grpc, echo.address, 64 * 1024);
    stalled.destroy();
    await waitFor(
      'tables empty',
      15_000,
      () => server.snapshot().establishedConnections === 0 && server.snapshot().pendingDials === 0,
    );
    assert.equal(server.snapshot().agents.length, 1, 'the upstream agent is still connected');
  },
);

test('kctl agent -> upstream proxy-server: plain protocol, real bytes', { timeout: 180_000 }, async (t) => {
  const bin = upstreamBin();
  const pki = await makePki();
  const dir = await tempDir(t, 'kctl-interop-');
  await Promise.all([
    writeFile(join(dir, 'ca.crt'), pki.ca),
    writeFile(join(dir, 'server.crt'), pki.serverCert),
    writeFile(join(dir, 'server.key'), pki.serverKey, { mode: 0o600 }),
  ]);
  const uds = join(dir, 'upstream.sock');
  const [agentPort, healthPort] = [await freePort(), await freePort()];
  const server = run(t, bin['proxy-server'], [
    '--mode',
    'grpc',
    '--uds-name',
    uds,
    '--delete-existing-uds-file',
    '--server-port',
    '0',
    '--cluster-cert',
    join(dir, 'server.crt'),
    '--cluster-key',
    join(dir, 'server.key'),
    '--cluster-ca-cert',
    join(dir, 'ca.crt'),
    '--agent-port',
    String(agentPort),
    '--agent-bind-address',
    '127.0.0.1',
    '--admin-port',
    String(await freePort()),
    '--health-port',
    String(healthPort),
    '--health-bind-address',
    '127.0.0.1',
    '--server-id',
    'upstream-1',
    '--server-count',
    '1',
  ]);
  await waitFor('upstream server listening', 30_000, () => existsSync(uds)).catch((err: Error) => {
    throw new Error(`${err.message}\n${server.output()}`);
  });

  const creds = await pki.nodeCert('kctl-node');
  const agent = new KonnectivityAgent({
    servers: [{ host: '127.0.0.1', port: agentPort }],
    ca: pki.ca,
    ...creds,
    agentId: 'kctl-node',
    identifiers: { host: ['kctl-node'], ipv4: ['127.0.0.1'] },
    syncIntervalMs: 200,
    log: quietLogger(),
  });
  await agent.start();
  t.after(() => agent.stop());
  await agent.ready(AbortSignal.timeout(30_000)).catch((err: Error) => {
    throw new Error(`${err.message}\n${server.output()}`);
  });
  const held = agent.snapshot().servers[0];
  assert.equal(held?.serverId, 'upstream-1');
  assert.deepEqual(held?.extensions, [], 'an upstream server does not answer the kctl extension');
  await waitFor(
    'upstream /readyz ok',
    30_000,
    async () => (await fetch(`http://127.0.0.1:${healthPort}/readyz`).catch(() => null))?.status === 200,
  );

  const echo = await echoServer(t);
  await echoRoundTrip(uds, echo.address, 4 * 1024 * 1024 + 3);
  await assert.rejects(dialViaProxy({ udsPath: uds, address: '127.0.0.1:1' }), /connection refused/);
  const http = await httpTarget(t);
  await testClient(t, bin['proxy-test-client'], [
    '--mode',
    'grpc',
    '--proxy-uds',
    uds,
    '--proxy-host',
    '',
    '--proxy-port',
    '0',
    '--request-port',
    String(http),
  ]);
  await waitFor(
    'agent tables empty',
    15_000,
    () => agent.snapshot().servers[0]?.connections === 0 && agent.snapshot().servers[0]?.pendingDials === 0,
  );
});
