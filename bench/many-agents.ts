// Many kctl konnectivity agents in one process, each with its own node certificate
// (CN=system:node:<name>, from makeNodeCerts in pki.ts), all against one server address, with the
// agent's default timings (backoff 1 s x1.5 to 10 s, jittered). For the WAN-profile figures
// (wan.ts), where the server is the peer compared and the agents are the same for both servers.
// argv[2]: JSON {serverPort, ca, nodes} (nodes: the file makeNodeCerts wrote). Prints on stdout
// one JSON line per change of an agent's state, seen every 10 ms:
// {"agent": <index>, "up": <holds a stream to the server>, "at": <epoch ms>, "transport"?}.
import { readFileSync } from 'node:fs';
import { KonnectivityAgent } from '../src/konnectivity/index.ts';
import { createLogger } from '../src/base/log.ts';
import type { NodeCredentials } from './pki.ts';

export interface AgentEvent {
  agent: number;
  up: boolean;
  at: number;
  /** The stream's protocol, when up: kctl-tunnel/1 with a kctl server, grpc with upstream's. */
  transport?: string;
}

const POLL_MS = 10;

const o = JSON.parse(process.argv[2] ?? '{}') as {
  serverPort: number;
  ca: string;
  nodes: string;
  extensions?: boolean;
};
const ca = readFileSync(o.ca);
const nodes = JSON.parse(readFileSync(o.nodes, 'utf8')) as NodeCredentials[];
const log = createLogger({ destination: process.stderr, pretty: false });
const agents = nodes.map(
  (n) =>
    new KonnectivityAgent({
      servers: [{ host: '127.0.0.1', port: o.serverPort }],
      ca,
      cert: n.cert,
      key: n.key,
      agentId: n.name,
      identifiers: { host: [n.name] },
      extensions: o.extensions ?? true,
      log,
    }),
);
const up = agents.map(() => false);
const poll = setInterval(() => {
  const at = Date.now();
  agents.forEach((a, i) => {
    const now = a.status().state === 'running';
    if (now === up[i]) return;
    up[i] = now;
    const transport = now ? a.snapshot().servers[0]?.transport : undefined;
    const e: AgentEvent = { agent: i, up: now, at, ...(transport ? { transport } : {}) };
    process.stdout.write(`${JSON.stringify(e)}\n`);
  });
}, POLL_MS);
for (const a of agents) await a.start();
for (const sig of ['SIGTERM', 'SIGINT'] as const)
  process.once(sig, () => {
    clearInterval(poll);
    void Promise.all(agents.map((a) => a.stop({ drain: false }))).finally(() => process.exit(0));
  });
