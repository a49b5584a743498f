// `npm run bench -- --wan`: the WAN-profile section, kctl against upstream apiserver-network-proxy
// v0.36.0 under the same profile. A run of its own: with --wan no other section runs. Each figure
// is one function returning its rows; FIGURES lists them in the order they run. A figure runs
// `runs` times, kctl and upstream alternating, and reports the median with min-max. The figures
// across the edge link (wan-edge.ts) share one lab and its partitions, so they are one entry.
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { KCTL_NODE_FLAGS } from '../assets/runtime-flags.ts';
import { freePort } from '../test/ports.ts';
import type { AgentEvent } from './many-agents.ts';
import { makeNodeCerts } from './pki.ts';
import {
  cpuMs,
  firstJsonLine,
  gauges,
  listeningOnLoopback,
  peakRssKiB,
  rssKiB,
  startProc,
  waitUntil,
  type Proc,
} from './procs.ts';
import { median, type Row } from './rows.ts';
import { spawnKctlServer, spawnUpstreamServer } from './stacks.ts';
import { clusterFigures } from './wan-cluster.ts';
import { edgeFigures } from './wan-edge.ts';
import { PEERS, peerRow, type Figure, type Peer, type WanContext, type WanSizes } from './wan-rows.ts';

export const WAN_SIZES: Record<'full' | 'quick' | 'smoke', WanSizes> = {
  full: {
    agents: 200,
    runs: 3,
    downloadBytes: 50 << 20,
    dials: 10,
    partitions: true,
    stallGiveUpMs: 30_000,
    cluster: true,
  },
  quick: {
    agents: 200,
    runs: 1,
    downloadBytes: 50 << 20,
    dials: 10,
    partitions: true,
    stallGiveUpMs: 30_000,
    cluster: true,
  },
  smoke: {
    agents: 20,
    runs: 1,
    downloadBytes: 1 << 20,
    dials: 3,
    partitions: false,
    stallGiveUpMs: 5_000,
    cluster: false,
  },
};

const FIGURES: Figure[] = [restartWithManyAgents, edgeFigures, clusterFigures];

export async function wanFigures(c: WanContext): Promise<Row[]> {
  const out: Row[] = [];
  for (const figure of FIGURES) out.push(...(await figure(c)));
  return out;
}

// ---- controller restart with many agents ----

const READY_BACKENDS = ['konnectivity_network_proxy_server_ready_backend_connections'];

interface RestartResult {
  /** Spawn of the new server to the last agent connected again, s. */
  reconnectS: number;
  /** Spawn of the new server to its agent port listening, s. */
  listenS: number;
  /** The new server listening to the last agent connected again, s. */
  afterListenS: number;
  /** First to last agent connected again, s. */
  spreadS: number;
  /** The new server's CPU from its agent port listening to the last agent connected, ms. */
  cpuMs: number;
  /** The new server's peak RSS up to the last agent connected (VmHWM), MiB. */
  peakMiB: number;
  /** The new server's RSS when its agent port started listening, MiB. */
  listenMiB: number;
  /** The agents' process's CPU from the kill to the last agent connected again, ms. */
  agentsCpuMs: number;
  /** The last agent connected to the server's ready-backend gauge showing all of them, s. */
  metricLagS: number;
}

/** One server and its spawn, again on the same ports after a restart. */
interface ServerUnderTest {
  spawn(): Proc;
  /** Resolves once a freshly spawned server takes agents. */
  ready(p: Proc): Promise<void>;
  adminPort: number;
  agentPort: number;
}

async function serverUnderTest(c: WanContext, peer: Peer): Promise<ServerUnderTest> {
  const [agentPort, adminPort, healthPort] = [await freePort(), await freePort(), await freePort()];
  let starts = 0;
  if (peer === 'kctl') {
    return {
      agentPort,
      adminPort,
      spawn: () => {
        const stamp = `${Date.now()}-${starts++}`;
        const { serverCert: cert, serverKey: key, ca } = c.pki;
        const uds = (kind: string): string => join(c.dir, `wan-kctl-${kind}${stamp}.sock`);
        return spawnKctlServer({
          udsPath: uds(''),
          connectUdsPath: uds('connect-'),
          agentPort,
          adminPort,
          cert,
          key,
          ca,
        });
      },
      ready: (p) => firstJsonLine(p).then(() => undefined),
    };
  }
  return {
    agentPort,
    adminPort,
    spawn: () =>
      spawnUpstreamServer(c.pki, {
        mode: 'grpc',
        uds: join(c.dir, `wan-upstream-${Date.now()}-${starts++}.sock`),
        agentPort,
        adminPort,
        healthPort,
        id: 'bench-wan-upstream',
      }),
    ready: (p) =>
      waitUntil(
        'upstream proxy-server healthy',
        async () => (await fetch(`http://127.0.0.1:${healthPort}/healthz`)).ok,
        30_000,
        p.output,
        [p],
      ),
  };
}

/**
 * `n` agents connected to a server; the server SIGKILLed (a crash: the kernel closes its sockets,
 * so every agent sees its stream end at once) and a new server process spawned on the same ports
 * as soon as the old one is gone. Timed from the agents' side (many-agents.ts).
 */
async function restartOnce(c: WanContext, peer: Peer, nodes: string, n: number): Promise<RestartResult> {
  const s = await serverUnderTest(c, peer);
  let server = s.spawn();
  let agents: Proc | undefined;
  try {
    await s.ready(server);
    agents = startProc('many-agents', process.execPath, [
      ...KCTL_NODE_FLAGS,
      '--import',
      'tsx',
      new URL('many-agents.ts', import.meta.url).pathname,
      // Against upstream's server, plain upstream protocol: no kctl-tunnel/1 offer that upstream
      // would turn down (a second TLS handshake per agent on its side), as upstream's own agent.
      JSON.stringify({ serverPort: s.agentPort, ca: c.pki.ca, nodes, extensions: peer === 'kctl' }),
    ]);
    const upAt = new Array<number | null>(n).fill(null);
    const transports = new Set<string>();
    let lastSeen: (() => void) | undefined;
    agents.onLine((l) => {
      const e = JSON.parse(l) as AgentEvent;
      upAt[e.agent] = e.up ? e.at : null;
      if (e.transport) transports.add(e.transport);
      lastSeen?.();
    });
    const a = agents;
    const detail = (): string => `${server.output()}\n${a.output()}`;
    await waitUntil(
      `${n} agents connected to the ${peer} server`,
      () => upAt.every((t) => t !== null),
      60_000,
      detail,
      [server, a],
    );

    const killedAt = Date.now();
    const agentsCpuAtKill = cpuMs(a.pid);
    const old = server;
    await new Promise<void>((r) => {
      old.child.once('exit', () => r());
      old.child.kill('SIGKILL');
    });
    const spawnedAt = Date.now();
    server = s.spawn();
    const pid = server.pid;
    // Read the moment the last agent is back, before any scrape of the server's metrics.
    let end: { cpu: number; peakKiB: number; agentsCpu: number } | undefined;
    lastSeen = () => {
      if (!upAt.every((t) => t !== null && t > killedAt)) return;
      lastSeen = undefined;
      end = { cpu: cpuMs(pid), peakKiB: peakRssKiB(pid), agentsCpu: cpuMs(a.pid) };
    };
    // Polled every 2 ms (waitUntil's 100 ms would miss the first agents' handshakes).
    while (!listeningOnLoopback(s.agentPort)) {
      if (server.child.exitCode !== null || Date.now() - spawnedAt > 30_000)
        throw new Error(`the new ${peer} server did not listen\n${detail()}`);
      await sleep(2);
    }
    const listenedAt = Date.now();
    const cpuAtListen = cpuMs(pid);
    const rssAtListen = rssKiB(pid);
    await waitUntil(`${n} agents connected to the new ${peer} server`, () => end !== undefined, 60_000, detail, [
      server,
      a,
    ]);
    const { cpu, peakKiB, agentsCpu } = end!;
    const want = peer === 'kctl' ? 'kctl-tunnel/1' : 'grpc';
    if ([...transports].some((t) => t !== want))
      throw new Error(`agents of the ${peer} server on ${[...transports].join(', ')}, not ${want} alone`);
    const back = upAt as number[];
    const [firstAt, lastAt] = [Math.min(...back), Math.max(...back)];
    // On a loaded host the harness may see the port listening after the first agents were back;
    // it listened before any of them.
    if (firstAt < listenedAt)
      c.log(
        `restart-${n}-agents ${peer}: the port was seen listening ${listenedAt - firstAt} ms after the first agent was back`,
      );
    const listenAt = Math.min(listenedAt, firstAt);
    await waitUntil(
      `the ${peer} server's ready-backend gauge at ${n}`,
      async () => (await gauges(`http://127.0.0.1:${s.adminPort}/metrics`, READY_BACKENDS)) === n,
      30_000,
      detail,
      [server],
    );
    const r: RestartResult = {
      reconnectS: (lastAt - spawnedAt) / 1000,
      listenS: (listenAt - spawnedAt) / 1000,
      afterListenS: (lastAt - listenAt) / 1000,
      spreadS: (lastAt - firstAt) / 1000,
      cpuMs: cpu - cpuAtListen,
      peakMiB: peakKiB / 1024,
      listenMiB: rssAtListen / 1024,
      agentsCpuMs: agentsCpu - agentsCpuAtKill,
      metricLagS: (Date.now() - lastAt) / 1000,
    };
    c.log(
      `restart-${n}-agents ${peer} (agents on ${[...transports].join(', ')}): all back ${r.reconnectS.toFixed(2)} s after the spawn ` +
        `(listening at ${r.listenS.toFixed(2)} s, spread ${r.spreadS.toFixed(2)} s); server cpu ${cpuAtListen} ms to listen, ${r.cpuMs} ms after; ` +
        `agents' cpu ${r.agentsCpuMs} ms after the kill; server rss ${r.listenMiB.toFixed(1)} MiB at listening, peak ${r.peakMiB.toFixed(1)} MiB; ` +
        `ready-backend gauge at ${n} ${r.metricLagS.toFixed(2)} s after the last agent`,
    );
    return r;
  } finally {
    await agents?.stop();
    await server.stop();
  }
}

async function restartWithManyAgents(c: WanContext): Promise<Row[]> {
  const n = c.sizes.agents;
  const nodes = await makeNodeCerts(
    c.dir,
    Array.from({ length: n }, (_, i) => `wan-node-${i}`),
  );
  const got: Record<Peer, RestartResult[]> = { kctl: [], upstream: [] };
  for (let run = 1; run <= c.sizes.runs; run++) {
    for (const peer of PEERS) {
      c.log(`restart-${n}-agents run ${run}/${c.sizes.runs}: ${peer}`);
      got[peer].push(await restartOnce(c, peer, nodes, n));
    }
  }
  const of = (k: keyof RestartResult): Record<Peer, number[]> => ({
    kctl: got.kctl.map((r) => r[k]),
    upstream: got.upstream.map((r) => r[k]),
  });
  const med = (k: keyof RestartResult, p: Peer, digits: number): string => median(of(k)[p]).toFixed(digits);
  const growth = (p: Peer): number[] => got[p].map((r) => r.peakMiB - r.listenMiB);
  const name = `restart-${n}-agents`;
  const agentsNote = `${n} kctl agents in one process (each its own node certificate, default backoff) in both columns: the server is the peer compared`;
  return [
    peerRow(
      `${name}-s`,
      's',
      of('reconnectS'),
      `${agentsNote}; server SIGKILLed and a new one spawned on the same port at once: spawn to the last agent connected again (the new server listened after ${med('listenS', 'kctl', 2)} s kctl, ${med('listenS', 'upstream', 2)} s upstream)`,
    ),
    peerRow(
      `${name}-after-listen-s`,
      's',
      of('afterListenS'),
      "the new server's agent port listening to the last agent connected again",
    ),
    peerRow(`${name}-spread-s`, 's', of('spreadS'), 'first to last agent connected again'),
    peerRow(
      `${name}-server-cpu-ms`,
      'ms',
      of('cpuMs'),
      "the new server's CPU (user + system) from the harness seeing its port listen (/proc/net/tcp every 2 ms) to the last agent connected again",
    ),
    peerRow(
      `${name}-agents-cpu-ms`,
      'ms',
      of('agentsCpuMs'),
      "the agents' process's CPU from the kill to the last agent connected again: one Node thread does every agent's reconnect, so it paces the spread",
    ),
    peerRow(
      `${name}-server-peak-mb`,
      'MiB',
      of('peakMiB'),
      `the new server's peak RSS (VmHWM) up to the last agent connected again; its RSS when it started listening: ${med('listenMiB', 'kctl', 1)} MiB kctl (node, sources loaded through tsx), ${med('listenMiB', 'upstream', 1)} MiB upstream`,
    ),
    peerRow(
      `${name}-server-growth-mb`,
      'MiB',
      { kctl: growth('kctl'), upstream: growth('upstream') },
      "the new server's peak RSS less its RSS when it started listening: what taking the agents back cost",
    ),
  ];
}
