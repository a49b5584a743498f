// `kctl controller` with the real etcd / kine, kube-apiserver, scheduler and controller-manager.
import { alive, waitFor, type WaitOptions } from '../../wait.ts';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { execa } from 'execa';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ControllerStatusReport as StatusReport } from '../../../src/controller/leases/status.ts';
import { tempDir } from '../../helpers.ts';
import { kctl, requireKctl } from '../lab/kctl.ts';
import { startPostgres } from '../lab/postgres.ts';

interface Running {
  proc: ChildProcess;
  lines: Record<string, unknown>[];
  exited: Promise<number | null>;
}

// Below the kernel's ephemeral range (32768-60999 here): a port in it can be taken at any moment
// by the local end of some outgoing connection, and a component then fails to bind.
let portBase = 20000 + Math.floor(Math.random() * 12000);

async function writeConfig(dir: string, storage: 'etcd' | 'kine', dataSource?: string): Promise<string> {
  const p = (portBase += 10);
  const file = join(dir, 'kctl.yaml');
  await writeFile(
    file,
    [
      'apiVersion: kctl.dev/v1alpha1',
      'kind: ClusterConfig',
      'spec:',
      `  api: { address: 127.0.0.1, port: ${p}, joinPort: ${p + 7} }`,
      `  konnectivity: { agentPort: ${p + 1}, adminPort: ${p + 2} }`,
      `  storage: { type: ${storage}, etcd: { clientPort: ${p + 3}, peerPort: ${p + 4} }${dataSource ? `, kine: { dataSource: "${dataSource}" }` : ''} }`,
      `  scheduler: { port: ${p + 5} }`,
      `  controllerManager: { port: ${p + 6} }`,
      '',
    ].join('\n'),
  );
  return file;
}

function startController(args: string[]): Running {
  const proc = spawn(requireKctl(), ['controller', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: Record<string, unknown>[] = [];
  let buf = '';
  proc.stdout!.on('data', (c: Buffer) => {
    buf += c.toString();
    let i: number;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      try {
        lines.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        lines.push({ msg: line });
      }
    }
  });
  proc.stderr!.on('data', (c: Buffer) => lines.push({ stderr: c.toString() }));
  const exited = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
  return { proc, lines, exited };
}

/** Waiting on a kctl this test started: a failure shows its last lines, and its exit ends the wait. */
function whileRunning(r: Running): WaitOptions {
  return {
    stopIf: () => r.proc.exitCode !== null && `kctl exited (${r.proc.exitCode})`,
    log: () =>
      r.lines
        .slice(-15)
        .map((l) => JSON.stringify(l))
        .join('\n'),
  };
}

const ready = (r: Running) =>
  waitFor('controller ready', 300_000, () => r.lines.some((l) => l.msg === 'controller ready'), whileRunning(r));

async function status(runDir: string): Promise<StatusReport> {
  const r = await kctl(['status', '-o', 'json', '--run-dir', runDir]);
  assert.equal(r.exitCode, 0, String(r.stderr));
  return JSON.parse(String(r.stdout)) as StatusReport;
}

async function stopController(r: Running): Promise<number | null> {
  if (r.proc.exitCode !== null) return r.proc.exitCode;
  r.proc.kill('SIGTERM');
  return Promise.race([
    r.exited,
    sleep(60_000).then(() => {
      r.proc.kill('SIGKILL');
      return -1;
    }),
  ]);
}

/**
 * Processes called `name` among the descendants of `root`. Not host-wide: the long tests run
 * workers (and their kubelets) beside this suite.
 */
async function descendantsNamed(root: number, name: string): Promise<number[]> {
  const ps = await execa('ps', ['-e', '-o', 'pid=,ppid=,comm=']);
  const rows = ps.stdout.split('\n').map((l) => l.trim().split(/\s+/));
  const tree = new Set([root]);
  for (let grew = true; grew;) {
    grew = false;
    for (const [pid, ppid] of rows) {
      if (tree.has(Number(ppid)) && !tree.has(Number(pid))) {
        tree.add(Number(pid));
        grew = true;
      }
    }
  }
  return rows.filter(([pid, , comm]) => comm === name && tree.has(Number(pid))).map(([pid]) => Number(pid));
}

/** The whole operator story, for one storage backend. */
async function controllerScenario(
  t: TestContext,
  storage: 'etcd' | 'kine',
  extraArgs: string[],
  dataSource?: string,
): Promise<void> {
  const dir = await tempDir(t);
  const dataDir = join(dir, 'data');
  const runDir = join(dir, 'run');
  const cfg = await writeConfig(dir, storage, dataSource);
  const args = ['--config', cfg, '--data-dir', dataDir, '--run-dir', runDir, ...extraArgs];
  const kubectl = (...a: string[]) => kctl(['--data-dir', dataDir, 'kubectl', ...a]);
  let r = startController(args);
  t.after(() => {
    r.proc.kill('SIGKILL');
  });
  await ready(r);
  // dist/kctl carries the malloc-trim addon: once ready, the memory the start freed goes back.
  const isTrim = (l: Record<string, unknown>): boolean =>
    l.msg === 'gave the heap memory the start freed back to the system';
  await waitFor('the trim after the start', 10_000, () => r.lines.some(isTrim), whileRunning(r));
  const trimmed = r.lines.find(isTrim)!;
  assert.ok(Number(trimmed.rssAfterMiB) <= Number(trimmed.rssBeforeMiB), JSON.stringify(trimmed));

  const s = await status(runDir);
  assert.equal(s.role, 'controller');
  assert.deepEqual(
    s.components.map((c) => c.name),
    [
      storage,
      'konnectivity-server',
      'encryption',
      'kube-apiserver',
      'node-watch',
      'bootstrap',
      'node-lease-access',
      'controller-lease',
      'join-server',
      'manifest-applier',
      'coredns-scaler',
      'kube-scheduler',
      'kube-controller-manager',
      'csr-approver',
      'network-policy',
      'kubelet-serving-check',
      'pki-renewer',
      'upgrade',
    ],
  );
  for (const c of s.components) assert.equal(c.state, 'running', `${c.name}: ${c.lastError ?? ''}`);
  const text = await kctl(['status', '--run-dir', runDir]);
  assert.match(String(text.stdout), /kube-apiserver\s+running\s+\d+/);
  // The in-process konnectivity server: no agents yet, and status says what that means.
  assert.equal(s.konnectivity?.agents.length, 0);
  assert.match(String(text.stdout), /no agents connected: kube-apiserver answers "No agent available"/);
  const egress = await readFile(join(dataDir, 'egress-selector.yaml'), 'utf8');
  // kube-apiserver dials through the HTTP-CONNECT socket by default (one CONNECT per dial).
  assert.match(egress, /proxyProtocol: HTTPConnect/);
  assert.match(egress, new RegExp(`udsName: ${join(runDir, 'konnectivity-connect.sock')}`));

  // kctl reset beside the running controller refuses, naming it, and changes nothing: even with
  // another --run-dir, since the data dir records who runs on it. A second controller is refused too.
  const dataBefore = await tree(dataDir);
  for (const rd of [runDir, join(dir, 'other-run')]) {
    const refused = await kctl(['reset', '--data-dir', dataDir, '--run-dir', rd]);
    assert.notEqual(refused.exitCode, 0);
    assert.equal(
      String(refused.stderr),
      `kctl: a kctl controller (pid ${r.proc.pid}) is running on ${dataDir}; stop it first (kill -TERM ${r.proc.pid}), then run kctl reset`,
    );
  }
  const busy = (d: string) =>
    `kctl: a kctl controller (pid ${r.proc.pid}) is already running on ${d}; stop it first (kill -TERM ${r.proc.pid}) or give this one its own --data-dir and --run-dir`;
  const second = await kctl(['controller', ...args]);
  assert.notEqual(second.exitCode, 0);
  assert.equal(String(second.stderr), busy(dataDir));
  assert.deepEqual(await tree(dataDir), dataBefore);
  assert.equal(existsSync(join(dir, 'other-run')), false);
  // Another data dir but this run dir: refused before it touches the sockets kube-apiserver uses.
  const sockets = await readdir(runDir);
  const sharedRun = await kctl(['controller', ...args.map((a) => (a === dataDir ? join(dir, 'other-data') : a))]);
  assert.notEqual(sharedRun.exitCode, 0);
  assert.equal(String(sharedRun.stderr), busy(runDir));
  assert.deepEqual(await readdir(runDir), sockets);
  assert.equal(existsSync(join(dir, 'other-data')), false);

  // The real API (still up after the refused reset), through the bundled kubectl and the admin kubeconfig.
  const readyz = await kubectl('get', '--raw', '/readyz');
  assert.equal(String(readyz.stdout).trim(), 'ok', String(readyz.stderr));
  // kctl's bootstrap objects are there; joins are decided by kctl's approver, not auto-approved by kube-controller-manager.
  const crb = await kubectl('get', 'clusterrolebinding', 'kctl:bootstrappers:node-bootstrapper', '-o', 'name');
  assert.equal(
    String(crb.stdout).trim(),
    'clusterrolebinding.rbac.authorization.k8s.io/kctl:bootstrappers:node-bootstrapper',
  );
  const auto = await kubectl('get', 'clusterrolebinding', 'kctl:bootstrappers:nodeclient-autoapprove', '-o', 'name');
  assert.match(String(auto.stderr), /NotFound/);
  const cm = await kubectl('create', 'configmap', 'survives-restart', '--from-literal=k=v');
  assert.equal(cm.exitCode, 0, String(cm.stderr));
  // The controller is never a node.
  assert.equal(String((await kubectl('get', 'nodes', '-o', 'name')).stdout).trim(), '');
  assert.deepEqual(await descendantsNamed(r.proc.pid!, 'kubelet'), []);
  assert.ok(
    (await descendantsNamed(r.proc.pid!, 'kube-apiserver')).length > 0,
    'the descendant check finds the controller’s own children',
  );
  assert.equal((await stat(join(dataDir, 'pki/admin.conf'))).mode & 0o777, 0o600);
  assert.equal((await stat(join(dataDir, 'pki/ca.key'))).mode & 0o777, 0o600);
  if (storage === 'etcd') assert.equal((await stat(join(dataDir, 'etcd'))).mode & 0o777, 0o700);
  else if (!dataSource) assert.ok(existsSync(join(dataDir, 'db/state.db')));
  else assert.equal(existsSync(join(dataDir, 'db')), false, 'kine on PostgreSQL must not create a SQLite file');

  // kill -9 of kube-apiserver: the API comes back by itself.
  const api = s.components.find((c) => c.name === 'kube-apiserver')!;
  process.kill(api.pid!, 'SIGKILL');
  await waitFor(
    'kube-apiserver restart',
    120_000,
    async () => {
      const c = (await status(runDir)).components.find((x) => x.name === 'kube-apiserver')!;
      return c.restarts >= 1 && c.state === 'running' && c.pid !== api.pid;
    },
    whileRunning(r),
  );
  await waitFor(
    'API back',
    120_000,
    async () => String((await kubectl('get', '--raw', '/readyz')).stdout).trim() === 'ok',
    whileRunning(r),
  );

  // SIGTERM stops everything in reverse order (the status socket, started first, goes last),
  // exits 0, and leaves no child behind.
  const pids = (await status(runDir)).components.map((c) => c.pid).filter((p): p is number => !!p);
  assert.equal(await stopController(r), 0);
  for (const pid of pids) assert.equal(await alive(pid), false, `component pid ${pid} survived`);
  const stopOrder = r.lines
    .filter((l) => l.component === 'manager' && String(l.msg).startsWith('stopping '))
    .map((l) => l.msg);
  assert.deepEqual(stopOrder, [
    'stopping upgrade',
    'stopping pki-renewer',
    'stopping kubelet-serving-check',
    'stopping network-policy',
    'stopping csr-approver',
    'stopping kube-controller-manager',
    'stopping kube-scheduler',
    'stopping coredns-scaler',
    'stopping manifest-applier',
    'stopping join-server',
    'stopping controller-lease',
    'stopping node-lease-access',
    'stopping bootstrap',
    'stopping node-watch',
    'stopping kube-apiserver',
    'stopping encryption',
    'stopping konnectivity-server',
    `stopping ${storage}`,
    'stopping status',
  ]);

  // A restart keeps the CA and the data.
  const ca = createHash('sha256')
    .update(await readFile(join(dataDir, 'pki/ca.crt')))
    .digest('hex');
  r = startController(args);
  await ready(r);
  assert.equal(
    createHash('sha256')
      .update(await readFile(join(dataDir, 'pki/ca.crt')))
      .digest('hex'),
    ca,
  );
  const again = await kubectl('get', 'configmap', 'survives-restart', '-o', 'jsonpath={.data.k}');
  assert.equal(String(again.stdout), 'v', String(again.stderr));

  // kctl killed outright: its children go with it.
  const pids2 = (await status(runDir)).components.map((c) => c.pid).filter((p): p is number => !!p);
  r.proc.kill('SIGKILL');
  await r.exited;
  await waitFor('children to die with kctl', 15_000, async () =>
    (await Promise.all(pids2.map(alive))).every((a) => !a),
  );

  // Stopped (here: killed, so its owner record and pid files are stale): reset removes everything
  // it made and says what.
  const reset = await kctl(['reset', '--data-dir', dataDir, '--run-dir', runDir]);
  assert.equal(reset.exitCode, 0, String(reset.stderr));
  const removed = String(reset.stdout)
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => String(l.msg).startsWith('removed '))
    .map((l) => String(l.path));
  const expected = [
    'bin',
    'pki',
    'audit',
    'audit-policy.yaml',
    'cluster-config.yaml',
    'egress-selector.yaml',
    storage === 'etcd' ? 'etcd' : dataSource ? undefined : 'db',
  ];
  for (const e of expected.filter((x) => x !== undefined))
    assert.ok(removed.includes(join(dataDir, e)), `reset did not list ${e}: ${removed.join(' ')}`);
  assert.ok(removed.includes(dataDir) && removed.includes(runDir), removed.join(' '));
  assert.equal(existsSync(dataDir), false);
  assert.equal(existsSync(runDir), false);
}

/** Every file below `dir` with its size and mtime, but storage's and the audit log's (they change by themselves): "changed nothing" made checkable. */
async function tree(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true });
  const out: string[] = [];
  for (const e of entries.filter((x) => !/^(etcd|db|audit)(\/|$)/.test(x)).sort()) {
    const s = await stat(join(dir, e)).catch(() => undefined);
    if (s && !s.isDirectory()) out.push(`${e} ${s.size} ${s.mtimeMs}`);
  }
  return out;
}

describe('controller', () => {
  test('with etcd: ready, kubectl, apiserver crash recovery, restart keeps data and CA, clean stop, no orphans', (t) =>
    controllerScenario(t, 'etcd', []));
  test('with kine (--single, SQLite): the same', (t) => controllerScenario(t, 'kine', ['--single']));
  test('with kine on a real PostgreSQL (spec.storage.kine.dataSource): the same', async (t) => {
    const pg = await startPostgres(t, (portBase += 10));
    await controllerScenario(t, 'kine', [], await pg.dataSource('kine'));
  });
});

describe('controller stopped while it starts', () => {
  // A SIGTERM right as a step begins (the manager's "starting X" line) reaches that component
  // in the middle of its start(): whatever it set up by then must still be torn down.
  const steps = [
    'kine',
    'konnectivity-server',
    'kube-apiserver',
    'bootstrap',
    'manifest-applier',
    'kube-controller-manager',
  ];
  test(`a SIGTERM as any of ${steps.join(', ')} starts: exit 0, no component left running, no status socket`, async (t) => {
    const dir = await tempDir(t);
    const dataDir = join(dir, 'data');
    const runDir = join(dir, 'run');
    const args = ['--config', await writeConfig(dir, 'kine'), '--data-dir', dataDir, '--run-dir', runDir, '--single'];
    const init = await kctl(['controller', '--init-only', ...args]);
    assert.equal(init.exitCode, 0, String(init.stderr));
    for (const step of steps) {
      const r = startController(args);
      t.after(() => void r.proc.kill('SIGKILL'));
      await waitFor(
        `starting ${step}`,
        180_000,
        () => r.lines.some((l) => l.msg === `starting ${step}`),
        whileRunning(r),
      );
      r.proc.kill('SIGTERM');
      assert.equal(
        await stopController(r),
        0,
        `${step}: exit\n${r.lines
          .slice(-10)
          .map((l) => JSON.stringify(l))
          .join('\n')}`,
      );
      assert.ok(!r.lines.some((l) => l.msg === 'controller ready'), `${step}: the start went on after SIGTERM`);
      const left = await execa('pgrep', ['-f', dataDir], { reject: false });
      assert.equal(left.stdout.trim(), '', `${step}: processes of this controller still running`);
      assert.equal(existsSync(join(runDir, 'status.sock')), false, `${step}: status socket left behind`);
    }
  });
});

describe('controller config errors', () => {
  /** `kctl controller --config <file>` with `yaml` in it: must exit non-zero with one line and write nothing; returns that line. */
  async function refusedConfig(t: TestContext, name: string, yaml: string): Promise<string> {
    const dir = await tempDir(t);
    const file = join(dir, name);
    await writeFile(file, yaml);
    const r = await kctl([
      'controller',
      '--config',
      file,
      '--data-dir',
      join(dir, 'data'),
      '--run-dir',
      join(dir, 'run'),
    ]);
    assert.notEqual(r.exitCode, 0);
    const lines = String(r.stderr).trim().split('\n');
    assert.equal(lines.length, 1, String(r.stderr));
    assert.equal(existsSync(join(dir, 'data')), false);
    assert.equal(existsSync(join(dir, 'run')), false);
    return lines[0]!;
  }

  test('a bad field exits non-zero with its path, and nothing is started or written', async (t) => {
    const line = await refusedConfig(
      t,
      'bad.yaml',
      'apiVersion: kctl.dev/v1alpha1\nkind: ClusterConfig\nspec:\n  api:\n    port: 99999\n  network:\n    podCIDRs: 10.0.0.0/8\n',
    );
    assert.match(
      line,
      /invalid config .*bad\.yaml: spec\.api\.port: .*65535.*; spec\.network: unknown field\(s\) "podCIDRs"/,
    );
  });

  test('bad spec.upgrade values are refused in one line naming each, before anything is written', async (t) => {
    const line = await refusedConfig(
      t,
      'upgrade.yaml',
      'spec:\n  upgrade:\n    drain: yes\n    drainTimeout: soon\n    maxUnavailable: 0\n    readyTimeout: 500ms\n    maxSurge: 2\n',
    );
    for (const field of ['drain', 'drainTimeout', 'maxUnavailable', 'readyTimeout'])
      assert.match(line, new RegExp(`spec\\.upgrade\\.${field}: `));
    assert.match(line, /spec\.upgrade\.readyTimeout: expected a duration of at least 1s, such as 5m/);
    assert.match(line, /spec\.upgrade: unknown field\(s\) "maxSurge"/);
  });

  test('kctl config create prints a config that kctl accepts', async (t) => {
    const dir = await tempDir(t);
    const r = await kctl(['config', 'create']);
    assert.equal(r.exitCode, 0);
    assert.match(String(r.stdout), /kind: ClusterConfig/);
    const file = join(dir, 'k.yaml');
    await writeFile(file, String(r.stdout));
    const init = await kctl([
      'controller',
      '--init-only',
      '--config',
      file,
      '--data-dir',
      join(dir, 'data'),
      '--run-dir',
      join(dir, 'run'),
    ]);
    assert.equal(init.exitCode, 0, String(init.stderr));
    const kc = await kctl(['kubeconfig', 'admin', '--data-dir', join(dir, 'data')]);
    assert.match(String(kc.stdout), /client-certificate-data/);
  });
});
