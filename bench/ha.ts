// HA figures in the network-namespace lab of test/e2e (lab/lab.ts; lab `bha`): three controllers on etcd
// (the second and third joined by token) and one worker that joined through the first, with a
// pod on it. Two figures, kctl only (upstream konnectivity has no peer for either):
//
// ha-agent-join-s: seconds from spawning the third controller (`kctl controller --token-file`)
//   until the worker's agent holds a stream to it (the third controller's status lists the
//   agent). Includes the join (keys, etcd learner and promotion), the controller's start and its
//   lease reaching the worker's controller watch.
// ha-failover-exec-s: seconds from SIGKILL of every process of the first controller (kctl and
//   its children) until `kubectl exec` through the second controller first succeeds (polled
//   every 250 ms). kube-apiserver on the survivor dials the kubelet through the agent's stream to
//   it, which was already open.
import { mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { mountsUnder } from '../src/worker/containerd.ts';
import {
  cleanupWorkerHost,
  killControllerProcesses,
  nodeReady,
  runPinnedPod,
  startLabWorker,
  type Tracked,
} from '../test/e2e/lab/cluster.ts';
import { HaLab, type LabCtl } from '../test/e2e/lab/ha-lab.ts';
import { requireKctl } from '../test/e2e/lab/kctl.ts';
import { createLab, type LabHost } from '../test/e2e/lab/lab.ts';

const LAB = 'bha';

async function until<T>(
  what: string,
  timeoutMs: number,
  everyMs: number,
  check: () => Promise<T | undefined | false>,
): Promise<T> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    const v = await check().catch(() => undefined);
    if (v) return v;
    await sleep(everyMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

export interface HaFigures {
  agentJoinSeconds: number;
  failoverExecSeconds: number;
}

export async function haFigures(parent: string, log: (m: string) => void): Promise<HaFigures> {
  const dir = await mkdtemp(join(parent, 'ha-'));
  const ha = new HaLab(requireKctl(), dir);
  const lab = await createLab(LAB, ['c1', 'c2', 'c3', 'w1']);
  const procs: (Tracked | undefined)[] = [];
  const w1: LabHost = lab.host('w1');
  // The nodes whose agents a controller holds (an agent's id is its certificate's user, system:node:<name>).
  const agents = async (c: LabCtl) => ((await ha.status(c)).konnectivity?.agents ?? []).map((a) => a.node);
  try {
    const [c1, c2, c3] = (await Promise.all(
      ['c1', 'c2', 'c3'].map((n) =>
        ha.controller(
          lab.host(n),
          `  api: { address: ${lab.host(n).ip} }\n  storage: { type: etcd, etcd: { memberName: ${n} } }\n`,
        ),
      ),
    )) as [LabCtl, LabCtl, LabCtl];
    await ha.start(c1);
    procs.push(c1.proc);
    await lab.isolate(w1, c1.host, c2.host, c3.host);
    const worker = startLabWorker(
      ha.kctlBin,
      w1,
      dir,
      String((await ha.run(c1, ['token', 'create', '--role', 'worker'])).stdout).trim(),
    );
    procs.push(worker);
    const kubectl1 = (args: string[], input?: string) => ha.kubectl(c1, args, input);
    await until('w1 Ready', 300_000, 500, () => nodeReady(kubectl1, 'w1'));
    await runPinnedPod(kubectl1, 'talker', 'w1', 'started');
    // One token for both joining controllers (c2 and c3): controller tokens allow one join unless told more.
    const tokenFile = await ha.tokenFile(
      'controller.token',
      String((await ha.run(c1, ['token', 'create', '--role', 'controller', '--uses', '2'])).stdout).trim(),
    );
    await ha.start(c2, tokenFile);
    procs.push(c2.proc);
    await until("w1's agent on c2", 60_000, 250, async () => (await agents(c2)).includes('w1'));
    log('ha: two controllers and a worker up; starting the third');

    const joinStart = Date.now();
    const c3Ready = ha.start(c3, tokenFile);
    c3Ready.catch(() => undefined); // awaited below; a failure then is the one reported
    procs.push(c3.proc);
    await until("w1's agent on c3", 300_000, 250, async () => (await agents(c3)).includes('w1'));
    const agentJoinSeconds = (Date.now() - joinStart) / 1000;
    await c3Ready;
    log(`ha: the agent reached the third controller ${agentJoinSeconds.toFixed(1)} s after it was started`);

    const s1 = await ha.status(c1);
    const killed = Date.now();
    killControllerProcesses(s1);
    const failoverExecSeconds =
      ((await ha.firstExec(c2, 'talker', { timeoutMs: 120_000, intervalMs: 250 })) - killed) / 1000;
    log(`ha: first exec through a survivor ${failoverExecSeconds.toFixed(1)} s after the first controller was killed`);
    return { agentJoinSeconds, failoverExecSeconds };
  } finally {
    for (const p of procs.reverse()) p?.child.kill('SIGKILL');
    await lab.destroy().catch((err: Error) => log(`ha: destroying the lab failed: ${err.message}`));
    await cleanupWorkerHost(join(dir, 'w1-data'), join(dir, 'w1-run'), 'w1');
    const left = await mountsUnder([dir]);
    if (left.length) log(`ha: ${left.length} mounts left under ${dir}, not removing it`);
    else await rm(dir, { recursive: true, force: true });
  }
}
