// HA figures in the network-namespace lab of test/e2e (lab `bha`): three controllers on etcd
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
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ControllerStatusReport } from '../src/controller/status.ts';
import { mountsUnder } from '../src/worker/containerd.ts';
import { cleanupWorkerHost, killControllerProcesses, nodeReady, runPinnedPod, startLabWorker, track, type Tracked } from '../test/e2e/cluster.ts';
import { requireKctl } from '../test/e2e/kctl.ts';
import { createLab, type LabHost } from '../test/e2e/lab.ts';

const LAB = 'bha';

async function until<T>(what: string, timeoutMs: number, everyMs: number, check: () => Promise<T | undefined | false>): Promise<T> {
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
  const kctlBin = requireKctl();
  const dir = await mkdtemp(join(parent, 'ha-'));
  const lab = await createLab(LAB, ['c1', 'c2', 'c3', 'w1']);
  const procs: Tracked[] = [];
  const ctl = (name: string) => ({
    host: lab.host(name),
    data: join(dir, `${name}-data`),
    run: join(dir, `${name}-run`),
    cfg: join(dir, `${name}.yaml`),
  });
  const [c1, c2, c3] = ['c1', 'c2', 'c3'].map(ctl) as [ReturnType<typeof ctl>, ReturnType<typeof ctl>, ReturnType<typeof ctl>];
  const w1: LabHost = lab.host('w1');
  const run = (c: typeof c1, args: string[]) => c.host.run(kctlBin, ['--data-dir', c.data, '--run-dir', c.run, ...args], { timeout: 60_000 });
  const start = async (c: typeof c1, tokenFile?: string) => {
    const p = track(
      c.host.spawn(kctlBin, [
        'controller',
        '--config',
        c.cfg,
        '--data-dir',
        c.data,
        '--run-dir',
        c.run,
        ...(tokenFile ? ['--token-file', tokenFile] : []),
      ]),
    );
    procs.push(p);
    return p;
  };
  const ready = (p: Tracked, name: string) => until(`${name} ready`, 240_000, 200, async () => p.saw('"msg":"controller ready"'));
  const agents = async (c: typeof c1) =>
    ((JSON.parse(String((await run(c, ['status', '-o', 'json'])).stdout)) as ControllerStatusReport).konnectivity?.agents ?? []).map((a) => a.id);
  try {
    for (const c of [c1, c2, c3])
      await writeFile(c.cfg, `spec:\n  api: { address: ${c.host.ip} }\n  storage: { type: etcd, etcd: { memberName: ${c.host.name} } }\n`);
    await ready(await start(c1), 'c1');
    await lab.isolate(w1, c1.host, c2.host, c3.host);
    const worker = startLabWorker(kctlBin, w1, dir, String((await run(c1, ['token', 'create', '--role', 'worker'])).stdout).trim());
    procs.push(worker);
    const kubectl1 = (args: string[], input?: string) =>
      c1.host.run(kctlBin, ['--data-dir', c1.data, 'kubectl', ...args], { input, timeout: 60_000 });
    await until('w1 Ready', 300_000, 500, () => nodeReady(kubectl1, 'w1'));
    await runPinnedPod(kubectl1, 'talker', 'w1', 'started');
    const tokenFile = join(dir, 'controller.token');
    await writeFile(tokenFile, String((await run(c1, ['token', 'create', '--role', 'controller'])).stdout).trim(), { mode: 0o600 });
    await ready(await start(c2, tokenFile), 'c2');
    await until("w1's agent on c2", 60_000, 250, async () => (await agents(c2)).includes('w1'));
    log('ha: two controllers and a worker up; starting the third');

    const joinStart = Date.now();
    await start(c3, tokenFile);
    await until("w1's agent on c3", 300_000, 250, async () => (await agents(c3)).includes('w1'));
    const agentJoinSeconds = (Date.now() - joinStart) / 1000;
    log(`ha: the agent reached the third controller ${agentJoinSeconds.toFixed(1)} s after it was started`);

    const s1 = JSON.parse(String((await run(c1, ['status', '-o', 'json'])).stdout)) as ControllerStatusReport;
    const killed = Date.now();
    killControllerProcesses(s1);
    await until('exec through c2', 120_000, 250, async () => {
      const r = await run(c2, ['kubectl', 'exec', 'talker', '--', 'echo', 'ok']);
      return String(r.stdout).trim() === 'ok';
    });
    const failoverExecSeconds = (Date.now() - killed) / 1000;
    log(`ha: first exec through a survivor ${failoverExecSeconds.toFixed(1)} s after the first controller was killed`);
    return { agentJoinSeconds, failoverExecSeconds };
  } finally {
    for (const p of procs.reverse()) p.child.kill('SIGKILL');
    await lab.destroy().catch((err: Error) => log(`ha: destroying the lab failed: ${err.message}`));
    await cleanupWorkerHost(join(dir, 'w1-data'), join(dir, 'w1-run'), 'w1');
    const left = await mountsUnder([dir]);
    if (left.length) log(`ha: ${left.length} mounts left under ${dir}, not removing it`);
    else await rm(dir, { recursive: true, force: true });
  }
}
