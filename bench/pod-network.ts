// The pod network section (--pod-network): pod-to-pod TCP throughput and round-trip time between
// two workers in each mode (routes, vxlan, wireguard), beside the same figures between the two
// hosts themselves in the same run. In the network-namespace lab of test/e2e: one controller host
// and two worker hosts on one link (routes needs one), so the modes differ by what they put on the
// path, not by the path.
//
// Per mode: the controller restarts with the mode (the workers follow live), fresh pods start on
// each worker (so they get the mode's MTU), and the probe (pod-network-tool.mjs) runs in the pods'
// network namespaces (nsenter into the container's): a server in the pod on w2, the client in the
// pod on w1. The host figures run the same probe in the hosts' namespaces, just before each mode's.
// Columns: kctl = pods, direct = hosts; upstream is empty (no other distribution's pod network
// runs here).
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa } from 'execa';
import { median, type Row } from './rows.ts';
import {
  controllerReady,
  labController,
  runPinnedPod,
  startIsolatedWorker,
  track,
  type Tracked,
} from '../test/e2e/lab/cluster.ts';
import { startLab } from '../test/e2e/lab/lab-test.ts';
import type { LabHost } from '../test/e2e/lab/lab.ts';
import { waitFor } from '../test/wait.ts';

export interface PodNetworkSizes {
  /** Bytes per throughput measurement. */
  bytes: number;
  /** Round trips per latency measurement. */
  roundTrips: number;
  /** Measurements per figure (the median is reported). */
  reps: number;
}

const MiB = 1024 * 1024;
export const POD_NETWORK_SIZES: Record<'full' | 'quick' | 'smoke', PodNetworkSizes> = {
  full: { bytes: 256 * MiB, roundTrips: 2000, reps: 5 },
  quick: { bytes: 64 * MiB, roundTrips: 500, reps: 3 },
  smoke: { bytes: 8 * MiB, roundTrips: 100, reps: 1 },
};

/**
 * The modes in order; the last is wireguard again with the two workers unable to reach each other
 * directly (WireGuard's port dropped between them, as between two sites behind NAT) and
 * spec.network.relay: controllers, so their pods' packets go through the controller.
 */
const STEPS = [
  { name: 'routes', mode: 'routes' },
  { name: 'vxlan', mode: 'vxlan' },
  { name: 'wireguard', mode: 'wireguard' },
  { name: 'wireguard-via-controllers', mode: 'wireguard', relay: 'controllers' },
] as const;
const TOOL = new URL('./pod-network-tool.mjs', import.meta.url).pathname;
const PORT = 5201;

interface Probe {
  /** Runs the probe's client there; resolves to its JSON line. */
  client(args: string[]): Promise<Record<string, number>>;
}

/** The probe in a namespace: `enter` are the nsenter arguments that reach it. */
function probeIn(enter: string[]): Probe {
  return {
    async client(args) {
      const r = await execa('nsenter', [...enter, process.execPath, TOOL, ...args], {
        reject: false,
        timeout: 300_000,
      });
      if (r.exitCode !== 0)
        throw new Error(`probe ${args.join(' ')}: ${String(r.stderr).trim() || `exit ${r.exitCode}`}`);
      return JSON.parse(String(r.stdout).trim()) as Record<string, number>;
    },
  };
}

function serveIn(enter: string[]): ChildProcess {
  return spawn('nsenter', [...enter, process.execPath, TOOL, 'serve', String(PORT)], {
    stdio: 'ignore',
    detached: true,
  });
}

/** Waits for the probe server on `host` to answer from `from`. */
async function answers(from: Probe, host: string, withinMs: number): Promise<void> {
  await waitFor(`the probe server on ${host} answers`, withinMs, async () =>
    from.client(['rtt', host, String(PORT + 1), '1']).then(
      () => true,
      () => false,
    ),
  );
}

/** Throughput and round-trip medians from `from` to `host`, once its server answers. */
async function measure(from: Probe, host: string, s: PodNetworkSizes): Promise<{ mbps: number[]; rttUs: number[] }> {
  await answers(from, host, 30_000);
  const mbps: number[] = [];
  const rttUs: number[] = [];
  for (let i = 0; i < s.reps; i++) {
    mbps.push((await from.client(['tput', host, String(PORT), String(s.bytes)])).mbps!);
    rttUs.push((await from.client(['rtt', host, String(PORT + 1), String(s.roundTrips)])).medianUs!);
  }
  return { mbps, rttUs };
}

/** Both workers drop WireGuard's packets from the other: no direct path, as between two sites behind NAT. */
async function cutWireguard(a: LabHost, b: LabHost, port: number): Promise<void> {
  for (const [self, other] of [
    [a, b],
    [b, a],
  ] as const) {
    const r = await self.run('iptables', [
      '-w',
      '5',
      '-I',
      'INPUT',
      '-p',
      'udp',
      '-s',
      other.ip,
      '--dport',
      String(port),
      '-j',
      'DROP',
    ]);
    if (r.exitCode !== 0) throw new Error(`iptables on ${self.name}: ${String(r.stderr).trim()}`);
  }
}

/** The controller process's CPU so far (ms) and the bytes its konnectivity server relayed between nodes. */
async function controllerCost(ctl: LabHost, pid: number): Promise<{ cpuMs: number; relayedBytes: number }> {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // utime and stime (fields 14 and 15 of the whole line), in clock ticks of 10 ms.
  const cpuMs = (Number(fields[11]) + Number(fields[12])) * 10;
  const metrics = String((await ctl.run('curl', ['-s', 'http://127.0.0.1:8133/metrics'])).stdout);
  const relayedBytes = Number(
    /kctl_konnectivity_relay_bytes_total\{result="forwarded"\} (\d+)/.exec(metrics)?.[1] ?? 0,
  );
  return { cpuMs, relayedBytes };
}

/** The host PID of the pod's container: its shell, found by the line it was started with. */
async function podPid(line: string): Promise<string> {
  const r = await execa('pgrep', ['-f', `echo ${line};`], { reject: false });
  const pid = String(r.stdout).trim().split('\n')[0];
  if (!pid) throw new Error(`no process of the pod started with "${line}"`);
  return pid;
}

const range = (xs: number[]): [number, number] => [Math.min(...xs), Math.max(...xs)];

export async function podNetworkFigures(o: { sizes: PodNetworkSizes; log: (msg: string) => void }): Promise<Row[]> {
  const cleanups: (() => Promise<void>)[] = [];
  const children: ChildProcess[] = [];
  try {
    const { lab, dir, kctlBin } = await startLab({ after: (fn) => cleanups.push(fn) }, 'bpn', ['ctl', 'w1', 'w2'], {
      dir: 'kctl-bench-podnet-',
      workers: ['w1', 'w2'],
    });
    const [ctl, w1, w2] = ['ctl', 'w1', 'w2'].map((n) => lab.host(n)) as [LabHost, LabHost, LabHost];
    const c = await labController(kctlBin, ctl, dir);
    const config = (mode: string, relay = 'none') =>
      writeFile(
        join(dir, 'kctl.yaml'),
        `spec:\n  api: { address: ${ctl.ip} }\n  network: { mode: ${mode}, relay: ${relay} }\n`,
      );
    await config('routes');
    let controller: Tracked = track(ctl.spawn(kctlBin, c.args));
    await controllerReady(controller);
    o.log('pod network: controller ready; joining w1 and w2');
    await Promise.all([w1, w2].map((w) => startIsolatedWorker(kctlBin, lab, c, ctl, w, dir)));

    const hostEnter = (h: LabHost) => ['--net=/run/netns/' + h.netns];
    children.push(serveIn(hostEnter(w2)));

    const rows: Row[] = [];
    for (const step of STEPS) {
      const { name: mode } = step;
      const relay = 'relay' in step ? step.relay : undefined;
      if (mode !== 'routes') {
        controller.child.kill('SIGTERM');
        await controller.exited;
        await config(step.mode, relay);
        controller = track(ctl.spawn(kctlBin, c.args));
        await controllerReady(controller);
        const device = step.mode === 'vxlan' ? 'kctl-vxlan' : 'kctl-wg';
        await waitFor(`the workers switch to ${step.mode}`, 120_000, async () =>
          (await Promise.all([w1, w2].map((w) => w.run('ip', ['link', 'show', device])))).every(
            (r) => r.exitCode === 0,
          ),
        );
      }
      if (relay) await cutWireguard(w1, w2, 51820);
      await c.kubectl(['delete', 'pod', '--all', '--wait=true', '--grace-period=1']);
      await runPinnedPod(c.kubectl, `pa-${mode}`, 'w1', `pn-a-${mode}`);
      await runPinnedPod(c.kubectl, `pb-${mode}`, 'w2', `pn-b-${mode}`);
      const ipB = String(
        (await c.kubectl(['get', 'pod', `pb-${mode}`, '-o', 'jsonpath={.status.podIP}'])).stdout,
      ).trim();
      const [pidA, pidB] = [await podPid(`pn-a-${mode}`), await podPid(`pn-b-${mode}`)];
      children.push(serveIn(['-t', pidB, '-n']));
      // The hosts' figures again beside each mode's: the shared machine's load moves between them.
      o.log(`pod network: hosts, then pods in ${mode} mode`);
      const hosts = await measure(probeIn(hostEnter(w1)), w2.ip, o.sizes);
      const podProbe = probeIn(['-t', pidA, '-n']);
      // Through the controllers, the pods reach each other once a node has heard nothing from the other for a minute.
      if (relay) await answers(podProbe, ipB, 180_000);
      const before = relay ? await controllerCost(ctl, controller.child.pid!) : undefined;
      const pods = await measure(podProbe, ipB, o.sizes);
      const note =
        step.mode === 'wireguard'
          ? `userspace WireGuard (wireguard-go): this kernel has no WireGuard module${relay ? "; no direct path between the workers, every packet through the controller's konnectivity server" : ''}`
          : undefined;
      if (before) {
        const after = await controllerCost(ctl, controller.child.pid!);
        const mib = (after.relayedBytes - before.relayedBytes) / MiB;
        const cpuMs = after.cpuMs - before.cpuMs;
        o.log(`pod network: the controller relayed ${mib.toFixed(0)} MiB in ${cpuMs} ms of its CPU`);
        rows.push({
          scenario: 'pod-relay-controller-cpu-ms-per-mib',
          unit: 'ms/MiB',
          kctl: mib > 0 ? cpuMs / mib : null,
          upstream: null,
          direct: null,
          note: `the kctl controller process's CPU (user + system) per MiB it relayed between the two workers (kctl_konnectivity_relay_bytes_total), over this step's pod figures: ${mib.toFixed(0)} MiB in ${(cpuMs / 1000).toFixed(1)} s of CPU`,
        });
      }
      const row = (scenario: string, unit: string, key: 'mbps' | 'rttUs'): Row => ({
        scenario: `${scenario} ${mode}`,
        unit,
        kctl: median(pods[key]),
        upstream: null,
        direct: median(hosts[key]),
        range: { kctl: range(pods[key]), direct: range(hosts[key]) },
        ...(note ? { note } : {}),
      });
      rows.push(row('pod-tcp-throughput', 'Mbit/s', 'mbps'), row('pod-tcp-rtt', 'µs', 'rttUs'));
    }
    controller.child.kill('SIGTERM');
    await controller.exited;
    return rows;
  } finally {
    for (const ch of children) if (ch.pid) process.kill(-ch.pid, 'SIGKILL');
    await sleep(200);
    for (const fn of cleanups) await fn();
  }
}
