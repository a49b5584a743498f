// The lab of the WAN section's edge figures (wan-edge.ts): two network-namespace hosts of the
// e2e lab (test/e2e/lab/lab.ts), a controller host with the konnectivity server and a worker
// host with the agent and the target, the worker behind the WAN emulator (lab/wan.ts) with the
// `edge` profile towards the controller. The Go driver runs in the controller host: through the
// server's unix socket (a file, so any namespace reaches it) as kube-apiserver would, or over
// TCP across the same link (direct). Metrics are read with curl inside each host: the admin ports
// listen on each host's own loopback.
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { KCTL_NODE_FLAGS } from '../assets/runtime-flags.ts';
import { createLab, type Lab, type LabHost } from '../test/e2e/lab/lab.ts';
import { wan, type WanLink } from '../test/e2e/lab/wan.ts';
import { goDriver, type Runner } from './go-driver.ts';
import { makePki, NODE, type BenchPki } from './pki.ts';
import { firstJsonLine, procOf, sumGauges, waitUntil, type Proc } from './procs.ts';
import { upstreamAgentArgs, upstreamBinDir, upstreamServerArgs } from './stacks.ts';
import type { Peer } from './wan-rows.ts';

const LAB = 'bwan';
const repo = new URL('../', import.meta.url).pathname;
// Fixed ports: each host is a namespace of its own, and one stack runs at a time.
const AGENT_PORT = 8132;
const SERVER_ADMIN = 8133;
const SERVER_HEALTH = 8134;
const AGENT_ADMIN = 8094;
const AGENT_HEALTH = 8093;

export interface EdgeLab {
  ctl: LabHost;
  wrk: LabHost;
  link: WanLink;
  /** The run's PKI again, the server certificate naming the controller host's address. */
  pki: BenchPki;
  /** The target's ports on the worker host's address: what the agent dials, and direct TCP from the controller host. */
  source: string;
  echo: string;
  /** Runs the Go driver in the controller host. */
  driver: Runner;
  destroy(): Promise<void>;
}

export async function edgeLab(dir: string): Promise<EdgeLab> {
  await goDriver();
  const lab: Lab = await createLab(LAB, ['ctl', 'wrk']);
  try {
    const [ctl, wrk] = [lab.host('ctl'), lab.host('wrk')];
    const target = procOf(
      'target',
      wrk.spawn(process.execPath, ['--import', 'tsx', join(repo, 'bench', 'target.ts'), wrk.ip], { cwd: repo }),
    );
    const ports = await firstJsonLine<{ source: number; echo: number }>(target);
    const pki = await makePki(join(dir, 'edge-pki'), ctl.ip);
    const link = await wan(lab, wrk, { peers: [ctl], profile: 'edge' });
    const driver: Runner = async (bin, args) => {
      const r = await ctl.run(bin, args, { timeout: 600_000 });
      if (r.exitCode !== 0)
        throw Object.assign(new Error(`exit ${r.exitCode}`), { stderr: String(r.stderr), code: r.exitCode });
      return String(r.stdout);
    };
    return {
      ctl,
      wrk,
      link,
      pki,
      source: `${wrk.ip}:${ports.source}`,
      echo: `${wrk.ip}:${ports.echo}`,
      driver,
      destroy: () => lab.destroy(),
    };
  } catch (err) {
    await lab.destroy();
    throw err;
  }
}

/** One server on the controller host and its agent on the worker host. */
export interface EdgeStack {
  peer: Peer;
  /** The server's GRPC frontend socket. */
  uds: string;
  /** Streams the agent holds to servers (open_server_connections); null when its metrics do not answer. */
  agentStreams(): Promise<number | null>;
  /** Agents the server holds (ready_backend_connections); null when its metrics do not answer. */
  serverAgents(): Promise<number | null>;
  /** Until the agent holds its stream and the server its agent. */
  connected(timeoutMs: number): Promise<void>;
  output(): string;
  stop(): Promise<void>;
}

/** Sum of the named gauges on a host's loopback /metrics page, read with curl inside the host. */
export async function hostGauge(host: LabHost, port: number, name: string): Promise<number | null> {
  const r = await host.run('curl', ['-sfL', '--max-time', '2', `http://127.0.0.1:${port}/metrics`], { timeout: 5_000 });
  return r.exitCode === 0 ? sumGauges(String(r.stdout), [name]) : null;
}

/**
 * kctl: bench/kctl-server.ts and bench/kctl-agent.ts with every timing their default (the agent's
 * retry too, as a kctl worker runs it). upstream: proxy-server --mode grpc and proxy-agent with
 * default flags, but for ports, certificates and the agent's identity.
 */
export async function startEdgeStack(l: EdgeLab, dir: string, peer: Peer): Promise<EdgeStack> {
  const { ctl, wrk, pki } = l;
  const uds = join(dir, `edge-${peer}-${Date.now()}.sock`);
  const node = (host: LabHost, name: string, script: string, options: object): Proc =>
    procOf(
      name,
      host.spawn(
        process.execPath,
        [...KCTL_NODE_FLAGS, '--import', 'tsx', join(repo, 'bench', script), JSON.stringify(options)],
        { cwd: repo },
      ),
    );
  const procs: Proc[] = [];
  const output = (): string => procs.map((p) => `${p.name}:\n${p.output()}`).join('\n');
  const stop = async (): Promise<void> => {
    for (const p of procs.reverse()) await p.stop();
  };
  try {
    if (peer === 'kctl') {
      const server = node(ctl, 'kctl-server', 'kctl-server.ts', {
        udsPath: uds,
        connectUdsPath: `${uds}.connect`,
        agentPort: AGENT_PORT,
        adminPort: SERVER_ADMIN,
        bindAddress: ctl.ip,
        cert: pki.serverCert,
        key: pki.serverKey,
        ca: pki.ca,
      });
      procs.push(server);
      await firstJsonLine(server);
      const agent = node(wrk, 'kctl-agent', 'kctl-agent.ts', {
        serverHost: ctl.ip,
        serverPort: AGENT_PORT,
        adminPort: AGENT_ADMIN,
        ca: pki.ca,
        cert: pki.nodeCert,
        key: pki.nodeKey,
        agentId: NODE,
        syncIntervalMs: null,
      });
      procs.push(agent);
      await firstJsonLine(agent);
    } else {
      const bin = upstreamBinDir();
      const server = procOf(
        'proxy-server',
        ctl.spawn(
          join(bin, 'proxy-server'),
          upstreamServerArgs(pki, {
            mode: 'grpc',
            uds,
            agentPort: AGENT_PORT,
            adminPort: SERVER_ADMIN,
            healthPort: SERVER_HEALTH,
            id: 'bench-edge-upstream',
            agentBindAddress: ctl.ip,
          }),
        ),
      );
      procs.push(server);
      await waitUntil(
        'upstream proxy-server healthy',
        async () =>
          (await ctl.run('curl', ['-sf', '--max-time', '2', `http://127.0.0.1:${SERVER_HEALTH}/healthz`])).exitCode ===
          0,
        30_000,
        output,
        procs,
      );
      procs.push(
        procOf(
          'proxy-agent',
          wrk.spawn(
            join(bin, 'proxy-agent'),
            upstreamAgentArgs(pki, {
              serverHost: ctl.ip,
              serverPort: AGENT_PORT,
              healthPort: AGENT_HEALTH,
              adminPort: AGENT_ADMIN,
            }),
          ),
        ),
      );
    }
  } catch (err) {
    await stop();
    throw err;
  }
  const stack: EdgeStack = {
    peer,
    uds,
    agentStreams: () => hostGauge(wrk, AGENT_ADMIN, 'konnectivity_network_proxy_agent_open_server_connections'),
    serverAgents: () => hostGauge(ctl, SERVER_ADMIN, 'konnectivity_network_proxy_server_ready_backend_connections'),
    async connected(timeoutMs) {
      await waitUntil(
        `the ${peer} agent and server connected over the edge link`,
        async () => (await stack.agentStreams()) === 1 && (await stack.serverAgents()) === 1,
        timeoutMs,
        output,
        procs,
      );
    },
    output,
    stop,
  };
  try {
    await stack.connected(60_000);
  } catch (err) {
    await stop();
    throw err;
  }
  return stack;
}

/**
 * Polls `read` every 250 ms until it returns `want`: the seconds from `since` (epoch ms) to the
 * read that did, or null once `untilMs` (epoch ms) has passed or `stop` is aborted first.
 */
export async function secondsUntil(
  read: () => Promise<number | null>,
  want: number,
  since: number,
  untilMs: number,
  stop?: AbortSignal,
): Promise<number | null> {
  while (Date.now() < untilMs && !stop?.aborted) {
    const at = Date.now();
    if ((await read()) === want) return (at - since) / 1000;
    await sleep(Math.max(0, at + 250 - Date.now()));
  }
  return null;
}
