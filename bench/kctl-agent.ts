// kctl's konnectivity agent alone in a process, with /metrics on an admin port, for the bench.
// argv[2]: JSON {serverPort, adminPort, ca, cert, key, agentId}, and optionally serverHost
// (default 127.0.0.1), keepaliveTimeMs / keepaliveTimeoutMs and syncIntervalMs / syncIntervalCapMs
// (tests that cut links want them short; syncIntervalMs is 200 ms unless given, null for the
// agent's own default, as a kctl worker runs it). Prints {"ready":true} once connected; answers "stats" on
// stdin like kctl-server.ts.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { KonnectivityAgent } from '../src/konnectivity/index.ts';
import { createLogger } from '../src/base/log.ts';
import { answerStats } from './stats-line.ts';

const o = JSON.parse(process.argv[2] ?? '{}') as {
  serverPort: number;
  adminPort: number;
  ca: string;
  cert: string;
  key: string;
  agentId: string;
  serverHost?: string;
  keepaliveTimeMs?: number;
  keepaliveTimeoutMs?: number;
  syncIntervalMs?: number | null;
  syncIntervalCapMs?: number;
};
const agent = new KonnectivityAgent({
  servers: [{ host: o.serverHost ?? '127.0.0.1', port: o.serverPort }],
  ca: readFileSync(o.ca),
  cert: readFileSync(o.cert),
  key: readFileSync(o.key),
  agentId: o.agentId,
  identifiers: { host: [o.agentId] },
  syncIntervalMs: o.syncIntervalMs === null ? undefined : (o.syncIntervalMs ?? 200),
  syncIntervalCapMs: o.syncIntervalCapMs,
  keepaliveTimeMs: o.keepaliveTimeMs,
  keepaliveTimeoutMs: o.keepaliveTimeoutMs,
  log: createLogger({ destination: process.stderr, pretty: false }),
});
const admin = createServer((req, res) => {
  if (req.url !== '/metrics') return void res.writeHead(404).end();
  void agent.metricsText().then((body) => res.writeHead(200, { 'content-type': 'text/plain' }).end(body));
});
await new Promise<void>((r) => admin.listen(o.adminPort, '127.0.0.1', r));
answerStats(() => {
  const servers = agent.snapshot().servers;
  return {
    servers: servers.length,
    targets: servers.reduce((n, s) => n + s.connections, 0),
    dials: servers.reduce((n, s) => n + s.pendingDials, 0),
    windowGrowth: agent.windowGrowthInUse(),
  };
});
await agent.init();
await agent.start();
await agent.ready(AbortSignal.timeout(30_000));
process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
for (const sig of ['SIGTERM', 'SIGINT'] as const)
  process.once(sig, () => void agent.stop({ drain: false }).finally(() => process.exit(0)));
