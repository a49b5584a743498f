// kctl's konnectivity server alone in a process (so its RSS is its own), for the bench.
// argv[2]: JSON {udsPath, connectUdsPath, agentPort, adminPort, cert, key, ca}. Prints {"ready":true}.
import { readFileSync } from 'node:fs';
import { KonnectivityServer } from '../src/konnectivity/index.ts';
import { createLogger } from '../src/base/log.ts';

const o = JSON.parse(process.argv[2] ?? '{}') as {
  udsPath: string;
  connectUdsPath: string;
  agentPort: number;
  adminPort: number;
  cert: string;
  key: string;
  ca: string;
};
const server = new KonnectivityServer({
  serverId: 'bench-kctl',
  udsPath: o.udsPath,
  httpConnectUdsPath: o.connectUdsPath,
  agentBindAddress: '127.0.0.1',
  agentPort: o.agentPort,
  adminPort: o.adminPort,
  tls: { cert: readFileSync(o.cert), key: readFileSync(o.key), ca: readFileSync(o.ca) },
  log: createLogger({ destination: process.stderr, pretty: false }),
});
await server.init();
await server.start();
process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
for (const sig of ['SIGTERM', 'SIGINT'] as const) process.once(sig, () => void server.stop().finally(() => process.exit(0)));
