// worker-join-s: seconds from `kctl worker --token ...` starting on a fresh host until its Node
// is Ready, in the network-namespace lab of test/e2e (lab/lab.ts): one controller host and one
// worker host per repetition. Only lab namespaces and loopback see traffic; kubectl runs on
// the controller host (lab addresses exist only in the lab).
//
// Timed window (per repetition): spawn of `kctl worker --token T --data-dir <fresh>` on the
// worker host -> first poll (the staged kubectl on the controller host, every 250 ms) that
// sees the Node's Ready condition True. Inside it: token check against the API server,
// staging the worker's binaries and image tarballs out of the kctl executable into the
// empty data dir, containerd start and image import, kubelet start and TLS bootstrap
// (CSR signed by the controller), CNI, and kubelet's first Ready status. kube-proxy and the
// konnectivity agent start after kubelet and may still be starting when the Node is Ready
// (the worker's own "worker ready" is logged as a phase, not timed). Outside the window: lab
// set-up, controller staging (`--init-only`), controller start until "controller ready",
// token creation, stopping and cleaning up the worker.
import { waitFor } from '../test/wait.ts';
import { existsSync, readFileSync, readlinkSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Result } from 'execa';
import { mountsUnder } from '../src/worker/containerd.ts';
import { workerPaths } from '../src/worker/paths.ts';
import { rssKiB, rssSplitKiB, workerHostKiB } from './procs.ts';
import { cleanupWorkerHost, labController, nodeReady, track, type Tracked } from '../test/e2e/lab/cluster.ts';
import { requireKctl } from '../test/e2e/lab/kctl.ts';
import { createLab, type LabHost } from '../test/e2e/lab/lab.ts';

const LAB = 'bwj';
const CONTROLLER_READY_MS = 300_000;
const NODE_READY_MS = 300_000;
const POLL_MS = 250;
const STOP_MS = 20_000;

/** Worker log messages whose first appearance is reported as a phase (seconds into the timed window). */
const PHASES: Record<string, string> = {
  'joined the cluster': 'joined',
  'components staged': 'binaries-staged', // the first of two: binaries, then image tarballs (just before "starting worker")
  'starting worker': 'starting',
  'worker ready': 'worker-ready',
};

/** Calls `fn` with every complete stdout line of a lab process. */
function onLines(p: Tracked, fn: (line: string) => void): void {
  let buf = '';
  p.child.stdout?.on('data', (chunk: Buffer) => {
    buf += chunk.toString();
    let i: number;
    while ((i = buf.indexOf('\n')) >= 0) {
      fn(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  });
}

const gone = (p: Tracked): boolean => p.child.exitCode !== null || p.child.signalCode !== null;

/** SIGTERM, then SIGKILL to the process group (lab.spawn starts each process in its own) after `STOP_MS`. */
export async function stopTracked(p: Tracked): Promise<void> {
  const { child } = p;
  if (gone(p)) return;
  child.kill('SIGTERM');
  const exited = await Promise.race([p.exited.then(() => true), sleep(STOP_MS).then(() => false)]);
  if (!exited && child.pid) {
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      /* gone */
    }
    await Promise.race([p.exited, sleep(5_000)]);
  }
}

/**
 * Joins `reps` fresh workers, one after another, to one lab controller; returns each join's
 * seconds (token to Node Ready), and the seconds from the controller's start to the first
 * CoreDNS replica Ready on the first worker (coredns-ready-s: controller start, token, join,
 * add-on stacks applied, CoreDNS image already imported on the worker, pod Ready). Everything is torn down before it returns or throws: worker
 * and controller processes, containerd shims and mounts, kubelet cgroups, lab namespaces, `dir`'s contents.
 */
export async function workerJoinSeconds(
  dir: string,
  log: (m: string) => void,
  reps = 1,
): Promise<{ joins: number[]; corednsReadySeconds: number | null; workerRssMiB: number[]; workerHostMiB: number[] }> {
  const kctlBin = requireKctl();
  const workerNames = Array.from({ length: reps }, (_, i) => `${LAB}${i + 1}`);
  await mkdir(dir, { recursive: true });
  const lab = await createLab(LAB, ['ctl', ...workerNames]);
  const ctl = lab.host('ctl');
  const procs: Tracked[] = [];
  const workerDirs = (name: string) => ({ data: join(dir, `${name}-data`), run: join(dir, `${name}-run`) });
  try {
    const c = await labController(kctlBin, ctl, dir);
    const init = await ctl.run(kctlBin, [...c.args, '--init-only'], { timeout: CONTROLLER_READY_MS, all: true });
    if (init.exitCode !== 0)
      throw new Error(`kctl controller --init-only failed (${init.exitCode}):\n${String(init.all).slice(-3000)}`);
    log('worker-join: controller staged, starting');
    const controllerStart = Date.now();
    let corednsReadySeconds: number | null = null;
    const controller = track(ctl.spawn(kctlBin, c.args));
    procs.push(controller);
    let controllerReady = false;
    onLines(controller, (line) => {
      if (line.includes('"msg":"controller ready"')) controllerReady = true;
    });
    await waitFor(
      'controller ready',
      CONTROLLER_READY_MS,
      async () => {
        if (gone(controller))
          throw new Error(
            `the controller exited (${controller.child.exitCode ?? controller.child.signalCode})\n${controller.log()}`,
          );
        return controllerReady;
      },
      { intervalMs: 200 },
    );
    // The staged kubectl with the admin kubeconfig, not `kctl kubectl`: a poll costs one Go process, not a Node one too.
    const kubectlBin = join(c.dataDir, 'bin', 'current', 'kubectl');
    if (!existsSync(kubectlBin)) throw new Error(`${kubectlBin} is missing after --init-only`);
    const kubectl = (args: string[]): Promise<Result> =>
      ctl.run(kubectlBin, ['--kubeconfig', join(c.dataDir, 'pki', 'admin.conf'), '--request-timeout=5s', ...args], {
        timeout: 10_000,
      });

    const out: number[] = [];
    const workerRssMiB: number[] = [];
    const workerHostMiB: number[] = [];
    for (const name of workerNames) {
      const h: LabHost = lab.host(name);
      const token = await c.createToken('1h');
      const d = workerDirs(name);
      log(`worker-join: starting worker ${name} (${out.length + 1}/${reps})`);
      const start = Date.now();
      const worker = track(
        h.spawn(kctlBin, [
          'worker',
          '--token',
          token,
          '--data-dir',
          d.data,
          '--run-dir',
          d.run,
          '--node-name',
          name,
          '--node-ip',
          h.ip,
        ]),
      );
      procs.push(worker);
      const phases = new Map<string, number>();
      onLines(worker, (line) => {
        const m = /"msg":"([^"]*)"/.exec(line);
        const phase = m && PHASES[m[1]!];
        if (!phase || phases.has(phase)) return;
        const t = /"time":"([^"]+)"/.exec(line);
        phases.set(phase, ((t ? Date.parse(t[1]!) : Date.now()) - start) / 1000);
      });
      await waitFor(
        `Node ${name} Ready`,
        NODE_READY_MS,
        async () => {
          if (gone(worker))
            throw new Error(`the worker exited (${worker.child.exitCode ?? worker.child.signalCode})\n${worker.log()}`);
          return nodeReady(kubectl, name);
        },
        { intervalMs: POLL_MS, log: () => `worker:\n${worker.log()}\ncontroller:\n${controller.log()}` },
      );
      const seconds = (Date.now() - start) / 1000;
      out.push(seconds);
      if (corednsReadySeconds === null) {
        await waitFor(
          'a CoreDNS replica Ready',
          NODE_READY_MS,
          async () => {
            const r = await kubectl([
              '-n',
              'kube-system',
              'get',
              'deployment',
              'coredns',
              '-o',
              'jsonpath={.status.readyReplicas}',
            ]);
            return Number(String(r.stdout)) >= 1;
          },
          { intervalMs: POLL_MS },
        );
        corednsReadySeconds = (Date.now() - controllerStart) / 1000;
        log(`coredns-ready: ${corednsReadySeconds.toFixed(1)} s after the controller started`);
      }
      // Not timed: for the log, when the worker itself reported every component ready (kube-proxy and the agent may come after the Node is Ready).
      await waitFor('worker ready', 30_000, async () => phases.has('worker-ready'), { intervalMs: 100 }).catch(
        () => undefined,
      );
      // worker-rss-mb: the kctl worker process itself, idle.
      if (phases.has('worker-ready') && worker.child.pid) {
        await sleep(10_000);
        const pid = execedPid(worker.child.pid);
        workerRssMiB.push(rssKiB(pid) / 1024);
        log(
          `worker-rss: ${workerRssMiB.at(-1)!.toFixed(1)} MiB, of which ${(rssSplitKiB(pid).anon / 1024).toFixed(1)} MiB anonymous`,
        );
        const host = workerHostKiB(pid, workerPaths(d.data, d.run));
        workerHostMiB.push(host.total / 1024);
        log(
          `worker-host: ${workerHostMiB.at(-1)!.toFixed(1)} MiB in distinct pages (RSS each: ${[...host.parts].map(([k, v]) => `${k} ${(v / 1024).toFixed(1)}`).join(', ')})`,
        );
      }
      log(
        `worker-join: ${name} Ready after ${seconds.toFixed(1)} s (${[...phases].map(([k, v]) => `${k} ${v.toFixed(1)} s`).join(', ')})`,
      );
      // The next join should not share the machine with this worker.
      await stopTracked(worker);
      await cleanupWorkerHost(d.data, d.run, name);
    }
    return { joins: out, corednsReadySeconds, workerRssMiB, workerHostMiB };
  } finally {
    for (const p of procs.reverse()) await stopTracked(p).catch(() => undefined);
    await lab.destroy().catch((err: Error) => log(`worker-join: destroying the lab failed: ${err.message}`));
    for (const name of workerNames) {
      const d = workerDirs(name);
      await cleanupWorkerHost(d.data, d.run, name);
    }
    // Never recurse into something still mounted (a container rootfs, a pod's netns).
    const left = await mountsUnder([dir]);
    if (left.length)
      log(`worker-join: ${left.length} mounts left under ${dir}, not removing it: ${left.slice(0, 5).join(' ')}`);
    else await rm(dir, { recursive: true, force: true });
  }
}

/** The kctl process behind a lab.spawn pid: nsenter execs it in place, or, if it forked, its one child. */
function execedPid(pid: number): number {
  if (!readlinkSync(`/proc/${pid}/exe`).endsWith('nsenter')) return pid;
  const child = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/)[0];
  return child ? Number(child) : pid;
}
