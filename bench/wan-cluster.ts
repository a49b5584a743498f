// The cluster figures of the WAN section: what a user's `kubectl cp` and `kubectl logs -f` get
// across the `edge` profile, through kctl's tunnel and through upstream's. One real cluster in a
// lab of two hosts: `kctl controller --single` on ctl, `kctl worker` on wrk (isolated: nothing on
// ctl reaches it; the worker only dials out), wrk behind the WAN emulator with the `edge` profile
// towards ctl. kube-apiserver's egress selector (GRPC) points at a symbolic link that names
// either kctl's in-process server socket or upstream proxy-server's, whose proxy-agent runs on
// wrk beside kctl's in-process one; switching the link switches the tunnel for the next request,
// with the same API server, kubelet, pods and link.
//
//   cp:   `kubectl cp` of a 50 MiB file of random bytes out of a busybox pod on wrk (exec of tar
//         through the API server, the tunnel and kubelet), timed around the kubectl process.
//   logs: `kubectl logs -f` of a pod that writes lines faster than the link carries, for
//         LOGS_MS: bytes received from the first to the last, per second.
import { existsSync, renameSync, statSync, symlinkSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Result } from 'execa';
import { mountsUnder } from '../src/worker/containerd.ts';
import {
  cleanupWorkerHost,
  labController,
  nodeReady,
  pinnedPod,
  startIsolatedWorker,
  track,
  type Tracked,
} from '../test/e2e/lab/cluster.ts';
import { requireKctl } from '../test/e2e/lab/kctl.ts';
import { createLab, type Lab, type LabHost } from '../test/e2e/lab/lab.ts';
import { waitFor } from '../test/wait.ts';
import { wan } from '../test/e2e/lab/wan.ts';
import { makePki } from './pki.ts';
import { procOf, type Proc } from './procs.ts';
import { hostGauge } from './wan-lab.ts';
import type { Row } from './rows.ts';
import { upstreamAgentArgs, upstreamBinDir, upstreamServerArgs } from './stacks.ts';
import { stopTracked } from './worker.ts';
import { EDGE_LINK_MIBPS, linkShare, PEERS, peerRow, skippedRow, type Peer, type WanContext } from './wan-rows.ts';
import { BUSYBOX_IMAGE } from '../src/payload/images.ts';

const LAB = 'bwcl';
const UPSTREAM_AGENT_PORT = 8142;
const UPSTREAM_ADMIN = 8143;
const UPSTREAM_HEALTH = 8144;
const AGENT_ADMIN = 8094;
const AGENT_HEALTH = 8093;
/**
 * `kubectl cp` tries per run. Across this link a copy can end short through either tunnel: when
 * tar exits, kubelet and containerd's streaming server on wrk close their connections with
 * megabytes still queued behind the link, and a write that reaches a closed socket draws a reset
 * that throws the queue away. Captures on wrk found two (2026-11-28), each every 5 s: kubectl's
 * websocket ping, passed through the tunnel to kubelet (kctl's agent holds it; upstream's
 * forwards it), and kubelet's own SPDY ping to containerd, which no tunnel carries (both alike).
 * kubectl's --retries does not resume after a websocket that closed abnormally. So a run tries
 * up to CP_TRIES copies; the rate is the first complete one's, and the note counts the copies
 * that ended early.
 */
const CP_TRIES = 4;
/** How long `kubectl logs -f` is read. */
const LOGS_MS = 15_000;

interface ClusterRun {
  /** The first complete copy's rate; null: none of CP_TRIES completed. */
  cpMiBps: number | null;
  /** Copies that ended early before it. */
  cpEarlyEnds: number;
  logsMiBps: number;
}

export async function clusterFigures(c: WanContext): Promise<Row[]> {
  const rows = [
    ['wan-kubectl-cp-mibs', 'MiB/s'],
    ['wan-kubectl-logs-f-mibs', 'MiB/s'],
  ];
  if (!c.sizes.cluster)
    return rows.map(([name, unit]) => skippedRow(name!, unit!, 'not measured with --smoke: it starts a cluster'));
  const got: Record<Peer, ClusterRun[]> = { kctl: [], upstream: [] };
  const bytes = c.sizes.downloadBytes;
  await withCluster(c, async (k) => {
    for (let run = 1; run <= c.sizes.runs; run++)
      for (const peer of PEERS) {
        k.use(peer);
        const cp = await k.cp(bytes, `${peer}-${run}`);
        const logsMiBps = await k.logsFollow();
        c.log(
          `cluster run ${run}/${c.sizes.runs} ${peer}: kubectl cp ${cp.mibps?.toFixed(2) ?? '-'} MiB/s (${cp.early} ended early first), kubectl logs -f ${logsMiBps.toFixed(2)} MiB/s`,
        );
        got[peer].push({ cpMiBps: cp.mibps, cpEarlyEnds: cp.early, logsMiBps });
      }
  });
  const of = (f: (r: ClusterRun) => number | null): Record<Peer, number[]> => ({
    kctl: got.kctl.map(f).filter((x): x is number => x !== null),
    upstream: got.upstream.map(f).filter((x): x is number => x !== null),
  });
  const share = (by: Record<Peer, number[]>): string =>
    `of the link's ${EDGE_LINK_MIBPS.toFixed(2)} MiB/s: kctl ${linkShare(by.kctl)}, upstream ${linkShare(by.upstream)}`;
  const cp = of((r) => r.cpMiBps);
  const early = (runs: ClusterRun[]): string => {
    const complete = runs.filter((r) => r.cpMiBps !== null).length;
    const tries = runs.reduce((n, r) => n + r.cpEarlyEnds, 0) + complete;
    return `${tries - complete} of ${tries} copies ended early${complete < runs.length ? ` (no complete copy in ${runs.length - complete} of ${runs.length} runs)` : ''}`;
  };
  const logs = of((r) => r.logsMiBps);
  return [
    peerRow(
      'wan-kubectl-cp-mibs',
      'MiB/s',
      cp,
      `a real cluster across the edge link; kubectl cp of a ${bytes / 2 ** 20} MiB file of random bytes out of a pod on the worker, timed around kubectl, the first complete copy of up to ${CP_TRIES} per run; ${share(cp)}; ` +
        `kctl ${early(got.kctl)}, upstream ${early(got.upstream)} (the end of the file lost when a program on the worker closes with it still queued; bench/README.md)`,
    ),
    peerRow(
      'wan-kubectl-logs-f-mibs',
      'MiB/s',
      logs,
      `the same cluster; kubectl logs -f of a pod writing lines faster than the link carries, read ${LOGS_MS / 1000} s, bytes from the first to the last; ${share(logs)}`,
    ),
  ];
}

interface Cluster {
  /** Points kube-apiserver's egress at this peer's server for the requests that follow. */
  use(peer: Peer): void;
  /** Up to CP_TRIES `kubectl cp` of `bytes` from the pod: the first complete one's MiB/s (null: none), and how many ended early before. */
  cp(bytes: number, tag: string): Promise<{ mibps: number | null; early: number }>;
  /** `kubectl logs -f` of the chatty pod for LOGS_MS: MiB/s. */
  logsFollow(): Promise<number>;
}

async function withCluster(c: WanContext, body: (k: Cluster) => Promise<void>): Promise<void> {
  const kctlBin = requireKctl();
  const dir = join(c.dir, 'cluster');
  await mkdir(dir, { recursive: true });
  const lab: Lab = await createLab(LAB, ['ctl', 'wrk']);
  const [ctl, wrk] = [lab.host('ctl'), lab.host('wrk')];
  const tracked: Tracked[] = [];
  const procs: Proc[] = [];
  try {
    const egressLink = join(dir, 'egress.sock');
    const ctlr = await labController(kctlBin, ctl, dir);
    const sockets: Record<Peer, string> = {
      kctl: join(ctlr.runDir, 'konnectivity-server.sock'),
      upstream: join(dir, 'upstream.sock'),
    };
    const point = (peer: Peer): void => {
      const tmp = `${egressLink}.${process.pid}.tmp`;
      symlinkSync(sockets[peer], tmp);
      renameSync(tmp, egressLink);
    };
    point('kctl');
    const egressConfig = join(dir, 'egress.yaml');
    await writeFile(
      egressConfig,
      JSON.stringify({
        apiVersion: 'apiserver.k8s.io/v1beta1',
        kind: 'EgressSelectorConfiguration',
        egressSelections: [
          { name: 'cluster', connection: { proxyProtocol: 'GRPC', transport: { uds: { udsName: egressLink } } } },
        ],
      }),
    );
    // Both servers' agents are sent the node's address: upstream's agent cannot dial a node name
    // (kctl's dials its own by name, node-name/1), and the two paths are compared on one target.
    const apiArgs = `egress-selector-config-file: ${egressConfig}, kubelet-preferred-address-types: InternalIP`;
    await writeFile(
      join(dir, 'kctl.yaml'),
      `spec:\n  api: { address: ${ctl.ip}, extraArgs: { ${apiArgs} } }\n  konnectivity: { proxyProtocol: GRPC }\n`,
    );
    c.log('cluster: starting the controller');
    const controller = track(ctl.spawn(kctlBin, ctlr.args));
    tracked.push(controller);
    await waitFor('controller ready', 300_000, async () => controller.saw('"msg":"controller ready"'), controller.log);
    c.log('cluster: the worker joins (it only dials out)');
    tracked.push(await startIsolatedWorker(kctlBin, lab, ctlr, ctl, wrk, dir));
    const kubectlBin = join(ctlr.dataDir, 'bin', 'current', 'kubectl');
    const kubectl = (args: string[], input?: string, timeout = 60_000): Promise<Result> =>
      ctl.run(kubectlBin, ['--kubeconfig', join(ctlr.dataDir, 'pki', 'admin.conf'), ...args], { input, timeout });
    await waitFor('node wrk Ready', 120_000, () => nodeReady(kubectl, 'wrk'));

    c.log('cluster: upstream proxy-server on the controller host, its proxy-agent on the worker');
    const pki = await makePki(join(dir, 'upstream-pki'), ctl.ip);
    const bin = upstreamBinDir();
    procs.push(
      procOf(
        'proxy-server',
        ctl.spawn(
          join(bin, 'proxy-server'),
          upstreamServerArgs(pki, {
            mode: 'grpc',
            uds: sockets.upstream,
            agentPort: UPSTREAM_AGENT_PORT,
            adminPort: UPSTREAM_ADMIN,
            healthPort: UPSTREAM_HEALTH,
            id: 'bench-cluster-upstream',
            agentBindAddress: ctl.ip,
          }),
        ),
      ),
    );
    procs.push(
      procOf(
        'proxy-agent',
        wrk.spawn(
          join(bin, 'proxy-agent'),
          upstreamAgentArgs(pki, {
            serverHost: ctl.ip,
            serverPort: UPSTREAM_AGENT_PORT,
            healthPort: AGENT_HEALTH,
            adminPort: AGENT_ADMIN,
          }),
        ),
      ),
    );
    const upstreamOutput = (): string => procs.map((p) => `${p.name}:\n${p.output().slice(-2000)}`).join('\n');
    await waitFor(
      'the upstream proxy-agent connected',
      60_000,
      async () =>
        (await hostGauge(ctl, UPSTREAM_ADMIN, 'konnectivity_network_proxy_server_ready_backend_connections')) === 1,
      upstreamOutput,
    );

    const link = await wan(lab, wrk, { peers: [ctl], profile: 'edge' });
    c.log('cluster: the edge profile is on; two pods on the worker');
    await runPod(
      kubectl,
      'bulk',
      `head -c ${c.sizes.downloadBytes} /dev/urandom > /bulk.bin && echo ready && while true; do sleep 1; done`,
    );
    // Lines of 1,000 bytes, about 5 MiB/s while /go exists (more than the link's 2.38 MiB/s); idle otherwise.
    await runPod(
      kubectl,
      'chatty',
      `echo ready; while true; do if [ -e /go ]; then head -c 1048576 /dev/zero | tr '\\0' x | fold -w 999; sleep 0.2; else sleep 0.2; fi; done`,
    );
    await body({
      use: point,
      async cp(bytes, tag) {
        const out = join(dir, `cp-${tag}.bin`);
        let early = 0;
        for (let i = 0; i < CP_TRIES; i++) {
          const began = Date.now();
          const r = await kubectl(['cp', 'bulk:/bulk.bin', out], undefined, 600_000);
          const secs = (Date.now() - began) / 1000;
          const size = existsSync(out) ? statSync(out).size : 0;
          await rm(out, { force: true });
          if (r.exitCode === 0 && size === bytes) return { mibps: bytes / 2 ** 20 / secs, early };
          early++;
          const said = String(r.stderr).trim().split('\n').at(-1);
          c.log(
            `cluster: kubectl cp (${tag}) ended early: exit ${r.exitCode}, ${(size / 2 ** 20).toFixed(1)} of ${bytes / 2 ** 20} MiB: ${said}`,
          );
        }
        return { mibps: null, early };
      },
      async logsFollow() {
        const go = await kubectl(['exec', 'chatty', '--', 'touch', '/go']);
        if (go.exitCode !== 0) throw new Error(`exec into chatty: ${String(go.stderr).trim()}`);
        try {
          await sleep(1_000);
          return await followFor(ctl, kubectlBin, join(ctlr.dataDir, 'pki', 'admin.conf'));
        } finally {
          await kubectl(['exec', 'chatty', '--', 'rm', '-f', '/go']);
        }
      },
    });
    const { up, down } = await link.stats();
    c.log(
      `cluster: the link carried ${up.forwarded} frames up (${up.lost} lost) and ${down.forwarded} down (${down.lost} lost)`,
    );
  } finally {
    for (const p of procs.reverse()) await p.stop();
    for (const t of tracked.reverse()) await stopTracked(t).catch(() => undefined);
    await lab.destroy().catch((err: Error) => c.log(`cluster: destroying the lab failed: ${err.message}`));
    await cleanupWorkerHost(join(dir, 'wrk-data'), join(dir, 'wrk-run'), 'wrk');
    const left = await mountsUnder([dir]);
    if (left.length) c.log(`cluster: ${left.length} mounts left under ${dir}, not removing it`);
    else await rm(dir, { recursive: true, force: true });
  }
}

async function runPod(
  kubectl: (args: string[], input?: string) => Promise<Result>,
  name: string,
  script: string,
): Promise<void> {
  const applied = await kubectl(
    ['apply', '-f', '-'],
    JSON.stringify(pinnedPod(name, 'wrk', {}, { image: BUSYBOX_IMAGE, command: ['sh', '-c', script] })),
  );
  if (applied.exitCode !== 0) throw new Error(`pod ${name}: ${String(applied.stderr).trim()}`);
  await waitFor(
    `pod ${name} ready`,
    300_000,
    async () => String((await kubectl(['logs', name])).stdout).startsWith('ready'),
    { intervalMs: 1_000 },
  );
}

/** `kubectl logs -f chatty --tail 0` for LOGS_MS: MiB/s from the first byte to the last. */
async function followFor(ctl: LabHost, kubectlBin: string, kubeconfig: string): Promise<number> {
  const child = ctl.spawn(kubectlBin, ['--kubeconfig', kubeconfig, 'logs', '-f', 'chatty', '--tail', '0']);
  let bytes = 0;
  let first = 0;
  let last = 0;
  let err = '';
  child.stdout!.on('data', (b: Buffer) => {
    last = Date.now();
    if (!first) first = last;
    else bytes += b.length;
  });
  child.stderr!.on('data', (b: Buffer) => (err = (err + b.toString()).slice(-2000)));
  await sleep(LOGS_MS);
  child.kill('SIGKILL');
  if (!first || last - first < LOGS_MS / 2)
    throw new Error(`kubectl logs -f chatty: ${bytes} bytes, ${last - first} ms of output: ${err.trim()}`);
  return bytes / 2 ** 20 / ((last - first) / 1000);
}
