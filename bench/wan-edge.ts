// The edge figures of the WAN section: kctl's konnectivity server and agent against upstream's
// proxy-server and proxy-agent v0.36.0, each at its default timings, across the `edge` profile
// (RTT 150 ± 20 ms, 1 % loss each way, 20 Mbit/s each way) in the lab of wan-lab.ts. One run of
// one peer:
//
//   stack 1: dials (dial-latency), one download (throughput), then a silent 30 s partition:
//            how long until the agent drops its stream and the server its agent (dead peer);
//            the heal, and how long until a dial works again (first dial after heal).
//   stack 2: a partition and a dial asked for as it begins: how long until the dial fails, and
//            with what error (dial during partition).
//   stack 3: one stream asks for data and is never read; beside it, one download through the
//            same agent (a stream nobody reads must not hold up the others).
//
// Each run measures kctl, then upstream, then direct TCP across the same link (dials and the
// download). Stack 2 is fresh because a partition can leave a stack broken: upstream's agent
// keeps a stream its server has dropped. The four partition figures take two partitions, not
// four: the dead-peer partition is the one the heal figure heals. A dial during it would change
// what it measures (an unanswered packet makes upstream's server give up sooner), so the dial
// figure has its own.
import { setTimeout as sleep } from 'node:timers/promises';
import { besideStalled, dialLatencies, probe, throughput, type BesideStalled, type GoPath } from './go-driver.ts';
import { median, type Row } from './rows.ts';
import { edgeLab, secondsUntil, startEdgeStack, type EdgeLab, type EdgeStack } from './wan-lab.ts';
import { EDGE_LINK_MIBPS, linkShare, PEERS, peerRow, skippedRow, type Peer, type WanContext } from './wan-rows.ts';

/** The silent partition of the dead-peer and heal figures; also how long the dead-peer figure waits. */
const PARTITION_MS = 30_000;
/** After the heal, dials are tried this long, one every 250 ms, each given TRY_MS. */
const HEAL_GIVE_UP_MS = 20_000;
const TRY_MS = 2_000;
/** A dial asked for during a partition is waited for this long (konnectivity-client gives up at 30 s). */
const DIAL_GIVE_UP_MS = 45_000;
/** Silence on the link before each partition (nothing measured crosses it), the same in every run. */
const QUIET_MS = 1_000;

interface PartitionResults {
  /** Seconds into the idle partition until the agent dropped its stream; null: not within PARTITION_MS. */
  agentDropS: number | null;
  /** The same for the server dropping its agent. */
  serverDropS: number | null;
  /** Seconds from the heal to the first dial that worked; null: none within HEAL_GIVE_UP_MS. */
  firstDialS: number | null;
  /** The last failed try after the heal, when none worked. */
  healError?: string;
  /** The agent's and the server's gauges when the heal figure ended. */
  afterHeal: { agentStreams: number | null; serverAgents: number | null };
  /** The dial asked for as the second partition began: seconds until it failed (or worked), and its error. */
  dialS: number;
  dialOk: boolean;
  dialError?: string;
  /** Seconds into the second partition until the server dropped its agent; null: not while the dial waited. */
  busyServerDropS: number | null;
}

interface PathRun {
  dialP50Ms: number;
  downloadMiBps: number;
  /** The download beside a stream nobody reads. */
  beside: BesideStalled;
}

type PeerRun = PathRun & { partition?: PartitionResults };

/** The stalled streams' requests are left this long before the download beside them starts. */
const FILL_MS = 3_000;

export async function edgeFigures(c: WanContext): Promise<Row[]> {
  const z = c.sizes;
  c.log('edge: starting the lab (controller and worker hosts, the worker behind the edge profile)');
  const l = await edgeLab(c.dir);
  const got: Record<Peer, PeerRun[]> = { kctl: [], upstream: [] };
  const direct: PathRun[] = [];
  try {
    for (let run = 1; run <= z.runs; run++) {
      const label = `run ${run}/${z.runs}`;
      for (const peer of PEERS) got[peer].push(await peerRun(c, l, peer, label));
      const directPath = { mode: 'direct' } as const;
      direct.push({
        ...(await pathRun(c, l, directPath, `${label} direct`)),
        beside: await stalledRun(c, l, directPath, `${label} direct`),
      });
    }
    const { up, down } = await l.link.stats();
    c.log(
      `edge: the link carried ${up.forwarded} frames up (${up.lost} lost) and ${down.forwarded} down (${down.lost} lost)`,
    );
  } finally {
    await l.destroy();
  }
  const partitionRows = z.partitions
    ? partitionFigures(got)
    : [
        ['wan-dead-server-s', 's'],
        ['wan-dead-agent-s', 's'],
        ['wan-first-dial-after-heal-s', 's'],
        ['wan-dial-during-partition-s', 's'],
      ].map(([name, unit]) => skippedRow(name!, unit!, 'not measured with --smoke: its partitions take 30 s and more'));
  return [
    ...partitionRows,
    throughputRow(got, direct, z.downloadBytes),
    besideStalledRow(got, direct, c),
    dialLatencyRow(got, direct, z.dials),
  ];
}

/** Dial latency and the download through one path. */
async function pathRun(c: WanContext, l: EdgeLab, path: GoPath, label: string): Promise<Omit<PathRun, 'beside'>> {
  const dialP50Ms = median(await dialLatencies(path, l.echo, c.sizes.dials, l.driver));
  const downloadMiBps = await throughput(path, l.source, 1, c.sizes.downloadBytes, l.driver);
  c.log(`edge ${label}: dial p50 ${dialP50Ms.toFixed(0)} ms, download ${downloadMiBps.toFixed(2)} MiB/s`);
  return { dialP50Ms, downloadMiBps };
}

const stallOptions = (c: WanContext) => ({
  stalled: 1,
  fillMs: Math.min(FILL_MS, c.sizes.stallGiveUpMs / 5),
  bytes: Math.round(c.sizes.downloadBytes / 5),
  giveUpMs: c.sizes.stallGiveUpMs,
});

/** One download beside a stream nobody reads, through one path. */
async function stalledRun(c: WanContext, l: EdgeLab, path: GoPath, label: string): Promise<BesideStalled> {
  const r = await besideStalled(path, l.source, stallOptions(c), l.driver);
  c.log(
    `edge ${label}: beside a stalled stream, ${r.complete ? 'a download' : `${(r.bytes / 2 ** 20).toFixed(2)} MiB of a download in ${c.sizes.stallGiveUpMs / 1000} s`} at ${r.mibps.toFixed(2)} MiB/s`,
  );
  return r;
}

async function peerRun(c: WanContext, l: EdgeLab, peer: Peer, label: string): Promise<PeerRun> {
  const log = (m: string): void => c.log(`edge ${label} ${peer}: ${m}`);
  let stack = await startEdgeStack(l, c.dir, peer);
  const fresh = async (): Promise<EdgeStack> => {
    await l.link.partition(false);
    await stack.stop();
    return (stack = await startEdgeStack(l, c.dir, peer));
  };
  try {
    const speed = await pathRun(c, l, { mode: 'grpc', uds: stack.uds }, `${label} ${peer}`);
    let partition: PartitionResults | undefined;
    if (c.sizes.partitions) {
      const dead = await deadPeer(l, stack);
      log(
        `idle partition: the agent dropped its stream after ${dead.agentDropS ?? '-'} s, the server its agent after ${dead.serverDropS ?? '-'} s`,
      );
      const heal = await firstDialAfterHeal(l, stack);
      log(
        `heal: ${heal.firstDialS === null ? `no dial within ${HEAL_GIVE_UP_MS / 1000} s (${heal.healError})` : `a dial worked after ${heal.firstDialS} s`}; ` +
          `agent streams ${heal.afterHeal.agentStreams}, server agents ${heal.afterHeal.serverAgents}`,
      );
      const busy = await dialDuringPartition(l, await fresh());
      log(
        `dial during a partition: ${busy.dialOk ? 'worked' : `failed (${busy.dialError})`} after ${busy.dialS} s; ` +
          `the server dropped its agent after ${busy.busyServerDropS ?? '-'} s`,
      );
      partition = { ...dead, ...heal, ...busy };
    }
    // Last, on a stack of its own: a stream nobody reads may leave a stack stuck.
    const beside = await stalledRun(c, l, { mode: 'grpc', uds: (await fresh()).uds }, `${label} ${peer}`);
    return { ...speed, beside, ...(partition && { partition }) };
  } finally {
    await l.link.partition(false);
    await stack.stop();
  }
}

/** Partitions the link and leaves it partitioned PARTITION_MS; meanwhile, when each end dropped the other. */
async function deadPeer(l: EdgeLab, s: EdgeStack): Promise<Pick<PartitionResults, 'agentDropS' | 'serverDropS'>> {
  await sleep(QUIET_MS);
  await l.link.partition(true);
  const at = Date.now();
  const until = at + PARTITION_MS;
  const [agentDropS, serverDropS] = await Promise.all([
    secondsUntil(s.agentStreams, 0, at, until),
    secondsUntil(s.serverAgents, 0, at, until),
  ]);
  await sleep(Math.max(0, until - Date.now()));
  return { agentDropS, serverDropS };
}

/** Heals the link; dials until one works. */
async function firstDialAfterHeal(
  l: EdgeLab,
  s: EdgeStack,
): Promise<Pick<PartitionResults, 'firstDialS' | 'healError' | 'afterHeal'>> {
  await l.link.partition(false);
  const healedAt = Date.now();
  const r = await probe(
    { mode: 'grpc', uds: s.uds },
    l.echo,
    { giveUpMs: HEAL_GIVE_UP_MS, tryTimeoutMs: TRY_MS, everyMs: 250 },
    l.driver,
  );
  const afterHeal = { agentStreams: await s.agentStreams(), serverAgents: await s.serverAgents() };
  return r.ok
    ? { firstDialS: (r.endedMs - healedAt) / 1000, afterHeal }
    : { firstDialS: null, healError: r.error, afterHeal };
}

/** Partitions the link and asks for one dial at once; heals once the dial has ended. */
async function dialDuringPartition(
  l: EdgeLab,
  s: EdgeStack,
): Promise<Pick<PartitionResults, 'dialS' | 'dialOk' | 'dialError' | 'busyServerDropS'>> {
  await sleep(QUIET_MS);
  await l.link.partition(true);
  const at = Date.now();
  const dialEnded = new AbortController();
  const serverDrop = secondsUntil(s.serverAgents, 0, at, at + DIAL_GIVE_UP_MS, dialEnded.signal);
  try {
    const r = await probe({ mode: 'grpc', uds: s.uds }, l.echo, { giveUpMs: DIAL_GIVE_UP_MS }, l.driver);
    dialEnded.abort();
    return {
      dialS: (r.endedMs - r.startedMs) / 1000,
      dialOk: r.ok,
      dialError: r.error,
      busyServerDropS: await serverDrop,
    };
  } finally {
    dialEnded.abort();
    await serverDrop;
    await l.link.partition(false);
  }
}

// ---- rows ----

const capped = (xs: (number | null)[], cap: number): number[] => xs.map((x) => x ?? cap);
const misses = (xs: (number | null)[]): number => xs.filter((x) => x === null).length;

/** Per peer, how many runs hit the cap: "upstream 3 of 3" (nothing when none did). */
function capNote(by: Record<Peer, (number | null)[]>, what: string): string {
  const parts = PEERS.filter((p) => misses(by[p]) > 0).map((p) => `${p} ${misses(by[p])} of ${by[p].length}`);
  return parts.length ? `; ${what}: ${parts.join(', ')} (the cap is the figure)` : '';
}

/** An error's text without the run's addresses and ports. */
const plain = (e: string | undefined): string => (e ?? '').replace(/\d+\.\d+\.\d+\.\d+:\d+/g, '<target>');

function partitionFigures(got: Record<Peer, PeerRun[]>): Row[] {
  const p = (peer: Peer): PartitionResults[] => got[peer].map((r) => r.partition!);
  const of = <T>(f: (r: PartitionResults) => T): Record<Peer, T[]> => ({
    kctl: p('kctl').map(f),
    upstream: p('upstream').map(f),
  });
  const cap = PARTITION_MS / 1000;
  const agentDrop = of((r) => r.agentDropS);
  const serverDrop = of((r) => r.serverDropS);
  const firstDial = of((r) => r.firstDialS);
  const silent = `the link partitioned silently (every packet dropped, no RST or ICMP) ${QUIET_MS / 1000} s after the last measured traffic, for ${cap} s`;
  const afterHeal = (peer: Peer): string => {
    const stuck = p(peer).filter((r) => r.firstDialS === null);
    if (!stuck.length) return '';
    const gauges = [
      ...new Set(
        stuck.map((r) => `agent ${r.afterHeal.agentStreams} stream, server ${r.afterHeal.serverAgents} agents`),
      ),
    ].join(' / ');
    return `; ${peer} after ${HEAL_GIVE_UP_MS / 1000} s: "${[...new Set(stuck.map((r) => plain(r.healError)))].join('" / "')}", ${gauges}`;
  };
  const errors = (peer: Peer): string =>
    [...new Set(p(peer).map((r) => (r.dialOk ? 'worked' : plain(r.dialError))))].join('" / "');
  const busyDrop = (peer: Peer): string => {
    const xs = p(peer).map((r) => r.busyServerDropS);
    return xs.every((x) => x === null)
      ? 'not while it waited'
      : `after ${xs.map((x) => (x === null ? '-' : x.toFixed(1))).join(' / ')} s`;
  };
  return [
    peerRow(
      'wan-dead-server-s',
      's',
      { kctl: capped(agentDrop.kctl, cap), upstream: capped(agentDrop.upstream, cap) },
      `${silent}: seconds until the agent's open_server_connections gauge reads 0 (read every 250 ms on the worker host)${capNote(agentDrop, `not within the ${cap} s`)}`,
    ),
    peerRow(
      'wan-dead-agent-s',
      's',
      { kctl: capped(serverDrop.kctl, cap), upstream: capped(serverDrop.upstream, cap) },
      `the same partition: seconds until the server's ready_backend_connections gauge reads 0${capNote(serverDrop, `not within the ${cap} s`)}`,
    ),
    peerRow(
      'wan-first-dial-after-heal-s',
      's',
      {
        kctl: capped(firstDial.kctl, HEAL_GIVE_UP_MS / 1000),
        upstream: capped(firstDial.upstream, HEAL_GIVE_UP_MS / 1000),
      },
      `that partition healed: seconds from the heal to the first dial and 1 KiB echo that worked through the server's GRPC socket (a try every 250 ms, each given ${TRY_MS / 1000} s)` +
        `${capNote(firstDial, `none within ${HEAL_GIVE_UP_MS / 1000} s`)}${afterHeal('kctl')}${afterHeal('upstream')}`,
    ),
    peerRow(
      'wan-dial-during-partition-s',
      's',
      of((r) => r.dialS),
      `a fresh stack, the link partitioned ${QUIET_MS / 1000} s after it connected, and one dial asked for at once: seconds until konnectivity-client returned; ` +
        `kctl: "${errors('kctl')}", upstream: "${errors('upstream')}"; the server dropped its agent meanwhile: kctl ${busyDrop('kctl')}, upstream ${busyDrop('upstream')}`,
    ),
  ];
}

function throughputRow(got: Record<Peer, PeerRun[]>, direct: PathRun[], bytes: number): Row {
  const by = {
    kctl: got.kctl.map((r) => r.downloadMiBps),
    upstream: got.upstream.map((r) => r.downloadMiBps),
    direct: direct.map((r) => r.downloadMiBps),
  };
  return peerRow(
    'wan-throughput-1-mibs',
    'MiB/s',
    by,
    `one ${bytes / 2 ** 20} MiB download per run through the tunnel (the agent's stream crosses the link); direct: TCP across the same link; of the link's ${EDGE_LINK_MIBPS.toFixed(2)} MiB/s: kctl ${linkShare(by.kctl)}, upstream ${linkShare(by.upstream)}, direct ${linkShare(by.direct)}`,
  );
}

function besideStalledRow(got: Record<Peer, PeerRun[]>, direct: PathRun[], c: WanContext): Row {
  const o = stallOptions(c);
  const rate = (runs: PathRun[]): number[] => runs.map((r) => r.beside.mibps);
  const complete = (runs: PathRun[]): string => `${runs.filter((r) => r.beside.complete).length}/${runs.length}`;
  return peerRow(
    'wan-throughput-beside-stalled-mibs',
    'MiB/s',
    { kctl: rate(got.kctl), upstream: rate(got.upstream), direct: rate(direct) },
    `a fresh stack; one tunnel asks the target for data and is never read; ${o.fillMs / 1000} s later one ${(o.bytes / 2 ** 20).toFixed(0)} MiB download through the same agent, ` +
      `given ${o.giveUpMs / 1000} s (the rate counts what arrived by then); finished: kctl ${complete(got.kctl)}, upstream ${complete(got.upstream)}, direct ${complete(direct)}; direct: two TCP connections across the same link`,
  );
}

function dialLatencyRow(got: Record<Peer, PeerRun[]>, direct: PathRun[], dials: number): Row {
  return peerRow(
    'wan-dial-p50-ms',
    'ms',
    {
      kctl: got.kctl.map((r) => r.dialP50Ms),
      upstream: got.upstream.map((r) => r.dialP50Ms),
      direct: direct.map((r) => r.dialP50Ms),
    },
    `${dials} sequential dials per run (dial, 1 KiB echoed, close), median per run; direct: TCP across the same link`,
  );
}
