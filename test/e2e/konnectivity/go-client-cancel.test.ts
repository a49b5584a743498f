// A Go konnectivity-client (upstream v0.36.0, the bench's driver) cancels an HTTP request through
// a single-use GRPC tunnel once the target has it, and the target answers right after: the client
// sees its own cancellation ("context canceled") through kctl's server and agent as through
// upstream's, and kctl's tables are empty afterwards.
//
// Two shapes (bench/go-driver/cancel.go):
// - apiserver: kube-apiserver's egress dialer; the tunnel outlives the request's context. The
//   client's tunnel ends only when the proxy says so, so an EOF here would mean the proxy closed
//   the connection before the client's own CLOSE_REQ: exact, never expected.
// - test: upstream's own test of this case; one context for the tunnel and the request. The
//   client's canceled stream ends its tunnel at once, and net/http returns that EOF when its read
//   loop gets there before its own cancel: a race inside the client, whatever the proxy does.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { before, test } from 'node:test';
import { cancelCounts, goDriver, type CancelCounts } from '../../../bench/go-driver.ts';
import { waitFor } from '../../wait.ts';
import { get, grpcServerFlags, pkiFiles, sample, start, type Files, type T } from '../lab/dropin.ts';
import { requireKctl } from '../lab/kctl.ts';
import { freePort } from '../../ports.ts';
import { upstreamBin } from '../lab/upstream.ts';

interface Stack {
  name: 'kctl' | 'upstream';
  uds: string;
  serverHealth: number;
  agentHealth: number;
}

/** A server and its agent, kctl's or upstream's, with the same flags. */
async function startStack(t: T, f: Files, name: Stack['name']): Promise<Stack> {
  const uds = join(f.dir, `${name}.sock`);
  const [agentPort, serverHealth, serverAdmin, agentHealth, agentAdmin] = await Promise.all([
    freePort(),
    freePort(),
    freePort(),
    freePort(),
    freePort(),
  ]);
  const serverArgs = [
    ...grpcServerFlags(f, uds, agentPort),
    `--health-port=${serverHealth}`,
    `--admin-port=${serverAdmin}`,
    `--server-id=cancel-${name}`,
    '--server-count=1',
  ];
  const agentArgs = [
    `--ca-cert=${f.ca}`,
    `--agent-cert=${f.agentCert}`,
    `--agent-key=${f.agentKey}`,
    '--proxy-server-host=127.0.0.1',
    `--proxy-server-port=${agentPort}`,
    `--agent-id=cancel-${name}`,
    '--agent-identifiers=host=cancel-node',
    `--health-server-port=${agentHealth}`,
    `--admin-server-port=${agentAdmin}`,
  ];
  const bin = upstreamBin();
  const server =
    name === 'kctl'
      ? start(t, requireKctl(), ['konnectivity-server', ...serverArgs])
      : start(t, bin['proxy-server'], serverArgs);
  const agent =
    name === 'kctl'
      ? start(t, requireKctl(), ['konnectivity-agent', ...agentArgs])
      : start(t, bin['proxy-agent'], agentArgs);
  await waitFor(
    `${name} server ready with its agent`,
    60_000,
    async () =>
      existsSync(uds) && (await get(`http://127.0.0.1:${serverHealth}/readyz`).catch(() => null))?.status === 200,
  ).catch((err: Error) => {
    throw new Error(`${err.message}\nserver:\n${server.output()}\nagent:\n${agent.output()}`);
  });
  return { name, uds, serverHealth, agentHealth };
}

const S = 'konnectivity_network_proxy_server_';

/** Proxy streams, pending dials and established connections on the server, open target connections on the agent. */
async function tables(s: Stack): Promise<Record<string, number>> {
  const server = (await get(`http://127.0.0.1:${s.serverHealth}/metrics`)).body;
  const agent = (await get(`http://127.0.0.1:${s.agentHealth}/metrics`)).body;
  return {
    proxyStreams: sample(server, `${S}grpc_connections{service_method="Proxy"}`),
    pendingDials: sample(server, `${S}pending_backend_dials`),
    established: sample(server, `${S}established_connections`),
    targetConnections: sample(agent, 'konnectivity_network_proxy_agent_open_endpoint_connections'),
  };
}

function add(a: CancelCounts | undefined, b: CancelCounts): CancelCounts {
  if (!a) return b;
  const messages = { ...a.messages };
  for (const [m, n] of Object.entries(b.messages)) messages[m] = (messages[m] ?? 0) + n;
  return {
    canceled: a.canceled + b.canceled,
    eof: a.eof + b.eof,
    answered: a.answered + b.answered,
    other: a.other + b.other,
    tunnelEndedFirst: a.tunnelEndedFirst + b.tunnelEndedFirst,
    messages,
  };
}

// Building the driver (once per source; the first build downloads its Go modules) is not the test's to time.
before(() => goDriver(), { timeout: 600_000 });

test(
  'a Go client that cancels sees "context canceled" through kctl as through upstream; no table keeps an entry',
  { timeout: 120_000 },
  async (t) => {
    const f = await pkiFiles(t);
    const stacks = [await startStack(t, f, 'kctl'), await startStack(t, f, 'upstream')];
    const ROUNDS = 4;
    const PER_ROUND = { test: 50, apiserver: 50 } as const;
    const seen: Record<string, CancelCounts> = {};
    // Rounds alternate the stacks, so a busy moment on the machine falls on both alike.
    for (let round = 0; round < ROUNDS; round++) {
      for (const s of round % 2 === 0 ? stacks : [...stacks].reverse()) {
        for (const shape of ['test', 'apiserver'] as const) {
          const key = `${s.name} ${shape}`;
          seen[key] = add(seen[key], await cancelCounts(s.uds, PER_ROUND[shape], shape));
        }
      }
    }
    for (const [key, c] of Object.entries(seen)) t.diagnostic(`${key}: ${JSON.stringify(c)}`);

    const kctlApi = seen['kctl apiserver']!;
    assert.equal(
      kctlApi.eof + kctlApi.other,
      0,
      `apiserver shape through kctl: only "context canceled" or the answer; saw ${JSON.stringify(kctlApi.messages)}`,
    );
    assert.ok(
      kctlApi.canceled > kctlApi.answered,
      `apiserver shape through kctl: the cancel, not the answer, wins: ${JSON.stringify(kctlApi)}`,
    );

    const pct = (x: number): string => `${(x * 100).toFixed(0)}%`;
    const share = (c: CancelCounts): number => c.canceled / (c.canceled + c.eof + c.answered + c.other);
    const [kctlTest, upstreamTest] = [share(seen['kctl test']!), share(seen['upstream test']!)];
    // The test shape's share moves with the machine's load, not with the proxy's packets: in every
    // EOF the client's stream had ended by its own cancel, with no frame from the proxy after it.
    // Measured on a 2-core machine shared with other builds, 200 requests per stack: with the
    // stacks interleaved as here, kctl 83-94% and upstream 84-93% over 10 runs (largest gap 8
    // points); in blocks run one after the other, kctl 66-94%, upstream 81-96% (largest gap 24).
    // At 200 requests a share's own noise is about 3 points. So: a majority, and never more than 30
    // points under upstream's in the same run. (A server that closed each tunnel 1 ms after the
    // request, tried once, gave 73% here against upstream's 88%: the apiserver shape's exact
    // check above is the one that catches a proxy closing first; it saw 3 EOFs in 100.)
    assert.ok(
      kctlTest > 0.5,
      `test shape through kctl: "context canceled" in ${pct(kctlTest)} (upstream ${pct(upstreamTest)})`,
    );
    assert.ok(
      kctlTest >= upstreamTest - 0.3,
      `test shape: "context canceled" in ${pct(kctlTest)} through kctl, ${pct(upstreamTest)} through upstream`,
    );

    const kctl = stacks[0]!;
    const empty = { proxyStreams: 0, pendingDials: 0, established: 0, targetConnections: 0 };
    let last = {};
    await waitFor('kctl tables empty', 10_000, async () => {
      last = await tables(kctl);
      return JSON.stringify(last) === JSON.stringify(empty);
    }).catch(() => assert.deepEqual(last, empty, 'kctl: a Proxy stream, dial or connection left after the cancels'));
  },
);
