// A kctl cluster in the test lab (lab.ts): the controller on one lab host, workers joining
// from others. Shared by the lab tests and bench/worker.ts, bench/ha.ts.
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Options, Result } from 'execa';
import { cleanupContainerd } from '../../../src/worker/containerd.ts';
import { kubeletCgroupRoot, removeCgroupRoot } from '../../../src/worker/kubelet.ts';
import { workerPaths } from '../../../src/worker/paths.ts';
import type { ControllerStatusReport } from '../../../src/controller/leases/status.ts';
import type { WorkerStatusReport } from '../../../src/worker/index.ts';
import type { Lab, LabHost } from './lab.ts';
import { waitFor } from '../../wait.ts';
import { BUSYBOX_IMAGE } from '../../../src/payload/images.ts';

export interface Tracked {
  child: ChildProcess;
  /** The last lines of output, for error messages. */
  log: () => string;
  /** True once the output (the last MB or more of it) contained `text`. */
  saw: (text: string) => boolean;
  /** The lines of the output (the last MB or more of it) that match `re`. */
  lines: (re: RegExp) => string[];
  exited: Promise<number | null>;
}

/** Keeps a lab process's output (for error messages) and its exit. */
export function track(child: ChildProcess): Tracked {
  let out = '';
  child.stdout?.on('data', (c: Buffer) => {
    out += c.toString();
    if (out.length > 2_000_000) out = out.slice(-1_000_000);
  });
  child.stderr?.on('data', (c: Buffer) => {
    out += c.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return {
    child,
    log: () => out.split('\n').slice(-25).join('\n'),
    saw: (text) => out.includes(text),
    lines: (re) => out.split('\n').filter((l) => re.test(l)),
    exited,
  };
}

export interface LabController {
  dataDir: string;
  runDir: string;
  /** `kctl controller --single ...` for this host (append `--init-only` to only stage and exit). */
  args: string[];
  /** kubectl with the admin kubeconfig (adminKubectl) run on the controller host: lab addresses exist only in the lab. */
  kubectl(args: string[], input?: string): Promise<Result>;
  /** `kctl token create --role worker [--expiry E]` on the controller host; throws when it fails. */
  createToken(expiry?: string): Promise<string>;
}

/**
 * kubectl with the admin kubeconfig of the controller whose data dir is `dataDir`, run on `host`:
 * what `kctl kubectl` runs, without starting kctl first when the controller has staged kubectl.
 * Each kctl start costs about half a second of CPU, and the tests poll with kubectl every second or
 * two, four clusters at once beside each other: that was the machine's largest single load.
 */
export function adminKubectl(kctlBin: string, host: LabHost, dataDir: string, opts: Options = {}) {
  const staged = join(dataDir, 'bin', 'current', 'kubectl');
  return (args: string[], input?: string): Promise<Result> =>
    existsSync(staged)
      ? host.run(staged, ['--kubeconfig', join(dataDir, 'pki', 'admin.conf'), ...args], {
          timeout: 60_000,
          ...opts,
          input,
        })
      : host.run(kctlBin, ['--data-dir', dataDir, 'kubectl', ...args], { timeout: 60_000, ...opts, input });
}

/** adminKubectl for a probe in a loop: kubectl gives up after 8 s, its process is killed after 15 s. */
export function probeKubectl(kctlBin: string, host: LabHost, dataDir: string): (args: string[]) => Promise<Result> {
  const kubectl = adminKubectl(kctlBin, host, dataDir, { timeout: 15_000 });
  return (args) => kubectl(['--request-timeout=8s', ...args]);
}

/** Writes the controller's config into `dir` (API on the host's lab address); starting it is the caller's. */
export async function labController(kctlBin: string, ctl: LabHost, dir: string): Promise<LabController> {
  const dataDir = join(dir, 'c-data');
  const runDir = join(dir, 'c-run');
  await writeFile(join(dir, 'kctl.yaml'), `spec:\n  api: { address: ${ctl.ip} }\n`);
  return {
    dataDir,
    runDir,
    args: ['controller', '--single', '--config', join(dir, 'kctl.yaml'), '--data-dir', dataDir, '--run-dir', runDir],
    kubectl: adminKubectl(kctlBin, ctl, dataDir),
    async createToken(expiry) {
      const r = await ctl.run(
        kctlBin,
        ['--data-dir', dataDir, 'token', 'create', '--role', 'worker', ...(expiry ? ['--expiry', expiry] : [])],
        {
          timeout: 60_000,
        },
      );
      if (r.exitCode !== 0) throw new Error(`kctl token create failed (${r.exitCode}): ${String(r.stderr).trim()}`);
      return String(r.stdout).trim();
    },
  };
}

/** Waits for a `kctl controller` started with track() to log "controller ready"; fails with its last lines. */
export function controllerReady(p: Tracked, what = 'controller ready'): Promise<boolean> {
  return waitFor(what, 180_000, async () => p.saw('"msg":"controller ready"'), p.log);
}

/**
 * SIGKILLs a controller and every child it supervises at once, as a host that loses its
 * processes would; `report` is its `kctl status -o json`.
 */
export function killControllerProcesses(report: ControllerStatusReport): void {
  for (const pid of [report.pid, ...report.components.map((x) => x.pid).filter((p): p is number => !!p)]) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }
}

export const NODE_READY_JSONPATH = '{.status.conditions[?(@.type=="Ready")].status}';

/** True when the Node exists and its Ready condition is True. */
export async function nodeReady(kubectl: (args: string[]) => Promise<Result>, node: string): Promise<boolean> {
  return String((await kubectl(['get', 'node', node, '-o', `jsonpath=${NODE_READY_JSONPATH}`])).stdout) === 'True';
}

/** `kubectl auth can-i` for node `node`: may it list the Leases of `namespace`? ('no' may come with the Node authorizer's reason.) */
export async function nodeMayListLeases(
  kubectl: (args: string[]) => Promise<Result>,
  node: string,
  namespace: string,
): Promise<boolean> {
  const asNode = [`--as=system:node:${node}`, '--as-group=system:nodes', '--as-group=system:authenticated'];
  const r = await kubectl(['auth', 'can-i', 'list', 'leases.coordination.k8s.io', '-n', namespace, ...asNode]);
  const answer = String(r.stdout).trim();
  if (!/^(yes|no)\b/.test(answer))
    throw new Error(`kubectl auth can-i answered neither yes nor no: ${answer} ${String(r.stderr)}`);
  return answer.startsWith('yes');
}

/** A killed worker leaves containerd shims, mounts and the kubelet's cgroups behind: clears them (before its dirs are removed). */
export async function cleanupWorkerHost(dataDir: string, runDir: string, nodeName: string): Promise<void> {
  await cleanupContainerd(workerPaths(dataDir, runDir)).catch(() => undefined);
  await removeCgroupRoot(kubeletCgroupRoot(workerPaths(dataDir, runDir), nodeName)).catch(() => undefined);
}

/** `kctl worker --token T` on a lab host, data and run dirs under `dir` (<name>-data, <name>-run), node name = host name. */
export function startLabWorker(
  kctlBin: string,
  host: LabHost,
  dir: string,
  token: string,
  extraArgs: string[] = [],
): Tracked {
  return track(
    host.spawn(kctlBin, [
      'worker',
      ...extraArgs,
      '--token',
      token,
      '--data-dir',
      join(dir, `${host.name}-data`),
      '--run-dir',
      join(dir, `${host.name}-run`),
      '--node-name',
      host.name,
      '--node-ip',
      host.ip,
    ]),
  );
}

/** `kctl status -o json` of the worker startLabWorker started on `host`. */
export async function labWorkerStatus(kctlBin: string, host: LabHost, dir: string): Promise<WorkerStatusReport> {
  const data = join(dir, `${host.name}-data`);
  const r = await host.run(kctlBin, [
    '--data-dir',
    data,
    '--run-dir',
    join(dir, `${host.name}-run`),
    'status',
    '-o',
    'json',
  ]);
  if (r.exitCode !== 0)
    throw new Error(`kctl status on ${host.name} failed (${r.exitCode}): ${String(r.stderr).trim()}`);
  return JSON.parse(String(r.stdout)) as WorkerStatusReport;
}

/**
 * A worker on `host` that only dials out to the controller on `ctl` (lab.isolate: nothing reaches
 * it from there), joined with a fresh token of `c`; resolves once it says it is ready.
 */
export async function startIsolatedWorker(
  kctlBin: string,
  lab: Lab,
  c: LabController,
  ctl: LabHost,
  host: LabHost,
  dir: string,
  extraArgs: string[] = [],
): Promise<Tracked> {
  const token = await c.createToken('1h');
  await lab.isolate(host, ctl);
  const worker = startLabWorker(kctlBin, host, dir, token, extraArgs);
  await waitFor('worker ready', 240_000, async () => worker.saw('"msg":"worker ready"'), worker.log);
  return worker;
}

/** A one-container pod bound to `node` (no scheduler), with a bundled image it never pulls; `container` adds image, command... */
export function pinnedPod(
  name: string,
  node: string,
  labels: Record<string, string>,
  container: Record<string, unknown>,
) {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels },
    spec: {
      nodeName: node,
      terminationGracePeriodSeconds: 1,
      containers: [{ name: 'c', imagePullPolicy: 'Never', ...container } as Record<string, unknown>],
    },
  };
}

/**
 * A busybox pod pinned to `node` that prints `line` once, then sleeps (with `serve`: answers
 * GET / on port 8080 with its name); resolves once it runs.
 */
export async function runPinnedPod(
  kubectl: (args: string[], input?: string) => Promise<Result>,
  name: string,
  node: string,
  line: string,
  serve = false,
): Promise<void> {
  const rest = serve
    ? `mkdir -p /www && echo ${name} > /www/index.html && exec httpd -f -p 8080 -h /www`
    : 'while true; do sleep 1; done';
  const pod = pinnedPod(name, node, {}, { image: BUSYBOX_IMAGE, command: ['sh', '-c', `echo ${line}; ${rest}`] });
  const applied = await kubectl(['apply', '-f', '-'], JSON.stringify(pod));
  if (applied.exitCode !== 0) throw new Error(`pod ${name}: ${String(applied.stderr)}`);
  const end = Date.now() + 120_000;
  while (Date.now() < end) {
    if (String((await kubectl(['get', 'pod', name, '-o', 'jsonpath={.status.phase}'])).stdout) === 'Running') return;
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(`pod ${name} did not run on ${node} within 120 s`);
}
