// kctl's konnectivity server alone in a process (so its RSS is its own), for the bench.
// argv[2]: JSON KctlServerOptions (stacks.ts). Prints {"ready":true}. A "stats" line on stdin answers with
// memory (after a collection, with --expose-gc), descriptors and tables (stats-line.ts).
import { readFileSync } from 'node:fs';
import { KonnectivityServer } from '../src/konnectivity/index.ts';
import { createLogger } from '../src/base/log.ts';
import { answerStats } from './stats-line.ts';
// Type only: erased at run time, so this process loads nothing of stacks.ts.
import type { KctlServerOptions } from './stacks.ts';

const o = JSON.parse(process.argv[2] ?? '{}') as KctlServerOptions;
const server = new KonnectivityServer({
  serverId: 'bench-kctl',
  udsPath: o.udsPath,
  httpConnectUdsPath: o.connectUdsPath,
  agentBindAddress: o.bindAddress ?? '127.0.0.1',
  keepaliveTimeMs: o.keepaliveTimeMs,
  keepaliveTimeoutMs: o.keepaliveTimeoutMs,
  agentPort: o.agentPort,
  adminPort: o.adminPort,
  tls: { cert: readFileSync(o.cert), key: readFileSync(o.key), ca: readFileSync(o.ca) },
  log: createLogger({ destination: process.stderr, pretty: false }),
});
answerStats(() => {
  const snap = server.snapshot();
  return {
    agents: snap.agents.length,
    established: snap.establishedConnections,
    pending: snap.pendingDials,
    closing: snap.closingConnections,
  };
});
await server.init();
await server.start();
process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
for (const sig of ['SIGTERM', 'SIGINT'] as const)
  process.once(sig, () => void server.stop().finally(() => process.exit(0)));
