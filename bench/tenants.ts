// API-only tenant figures (spec.profile: api-only), kctl only: N tenants on this host, each with
// its own config ports, data dir and CA, started at once.
//
// tenant-ready-s (n): seconds from spawning `kctl controller` to the tenant's /readyz answering
//   200; with n > 1, the slowest of the n started together.
// tenant-memory-mb (n): per tenant, the proportional set size (PSS) of its processes (kctl, kine,
//   kube-apiserver, kube-controller-manager) after a CRD and 1,000 custom objects were created in
//   it and 15 s passed, averaged over the n tenants. PSS splits pages shared between processes
//   (the executables' code) among them, so this is the tenant's share of the host's memory,
//   its kctl process included. The tenants' bin dirs are hard links to one staged copy of the
//   binaries, as tenants sharing a host should have them: separate copies are separate pages. The same figure for one full-profile controller on kine (what an
//   operator ran before the api-only profile) is measured in the same run for the ratio.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { link, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa } from 'execa';
import type { ControllerStatusReport } from '../src/controller/status.ts';
import { requireKctl } from '../test/e2e/kctl.ts';
import { apiStatus, createWidgets } from '../test/e2e/tenant-api.ts';

const BASE_PORT = 13000;

export interface TenantRound {
  tenants: number;
  /** Slowest spawn-to-/readyz of the round, seconds. */
  readySeconds: number;
  /** Mean PSS per tenant, MiB. */
  memoryMiB: number;
}

interface Tenant {
  port: number;
  dataDir: string;
  runDir: string;
  child: ChildProcess;
}

async function pssKiB(pid: number): Promise<number> {
  const text = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => '');
  return Number(/^Pss:\s+(\d+) kB/m.exec(text)?.[1] ?? 0);
}

async function tenantPssMiB(kctlBin: string, t: Tenant): Promise<number> {
  const r = await execa(kctlBin, ['status', '-o', 'json', '--run-dir', t.runDir], { reject: false });
  const s = JSON.parse(r.stdout) as ControllerStatusReport;
  const pids = [s.pid, ...s.components.flatMap((c) => (c.pid ? [c.pid] : []))];
  let kib = 0;
  for (const pid of pids) kib += await pssKiB(pid);
  return kib / 1024;
}

/** One round: `n` tenants (profile `profile`) started together, measured, stopped. */
async function round(kctlBin: string, parent: string, n: number, profile: 'api-only' | 'full', log: (m: string) => void): Promise<TenantRound> {
  const dir = await mkdtemp(join(parent, `tenants-${n}-`));
  const tenants: Tenant[] = [];
  try {
    // Every tenant's bin dir holds hard links to one staged copy, so the executables' pages are
    // in memory once for all tenants (staging keeps a file whose sha256 matches).
    const shared = join(dir, 'staged');
    await execa(kctlBin, ['controller', '--init-only', '--api-only', '--data-dir', shared, '--run-dir', join(dir, 'staged-run')]);
    const spawned = Date.now();
    for (let i = 0; i < n; i++) {
      const port = BASE_PORT + i * 10;
      const config = join(dir, `t${i}.yaml`);
      // A full controller needs its other ports moved too, so it can share the host with a test run.
      const full =
        profile === 'full'
          ? `  scheduler: { port: ${port + 2} }\n  konnectivity: { agentPort: ${port + 3}, adminPort: ${port + 4} }\n  api: { address: 127.0.0.1, port: ${port}, joinPort: ${port + 5} }\n`
          : `  api: { address: 127.0.0.1, port: ${port} }\n`;
      await writeFile(config, `spec:\n  profile: ${profile}\n  storage: { type: kine }\n  controllerManager: { port: ${port + 1} }\n${full}`);
      const dataDir = join(dir, `t${i}-data`);
      const runDir = join(dir, `t${i}-run`);
      await mkdir(join(dataDir, 'bin'), { recursive: true });
      for (const f of await readdir(join(shared, 'bin'), { withFileTypes: true }))
        if (f.isFile() && !f.name.startsWith('.')) await link(join(shared, 'bin', f.name), join(dataDir, 'bin', f.name));
      const child = spawn(kctlBin, ['controller', '--config', config, '--data-dir', dataDir, '--run-dir', runDir], { stdio: 'ignore' });
      tenants.push({ port, dataDir, runDir, child });
    }
    const readyAt = await Promise.all(
      tenants.map(async (t) => {
        const caFile = join(t.dataDir, 'pki', 'ca.crt');
        for (;;) {
          if (t.child.exitCode !== null) throw new Error(`tenant on port ${t.port} exited (${t.child.exitCode})`);
          if (Date.now() - spawned > 300_000) throw new Error(`tenant on port ${t.port} not ready in 300 s`);
          const ca = existsSync(caFile) ? await readFile(caFile, 'utf8') : null;
          if (ca && (await apiStatus(t.port, '/readyz', { ca, timeoutMs: 2000 }).catch(() => 0)) === 200) return Date.now();
          await sleep(100);
        }
      }),
    );
    const readySeconds = (Math.max(...readyAt) - spawned) / 1000;
    log(`tenants: ${n} ${profile} ready, the slowest after ${readySeconds.toFixed(1)} s`);
    // The controller logs ready once its controller-manager runs too; wait for that before filling.
    for (const t of tenants)
      for (let i = 0; i < 300; i++) {
        const r = await execa(kctlBin, ['status', '-o', 'json', '--run-dir', t.runDir], { reject: false });
        if (r.exitCode === 0 && (JSON.parse(r.stdout) as ControllerStatusReport).components.every((c) => c.state === 'running')) break;
        await sleep(200);
      }
    await Promise.all(
      tenants.map((t) =>
        createWidgets((args, input) => execa(kctlBin, ['--data-dir', t.dataDir, 'kubectl', ...args], { input, reject: false }), 1000),
      ),
    );
    await sleep(15_000);
    let total = 0;
    for (const t of tenants) total += await tenantPssMiB(kctlBin, t);
    const memoryMiB = total / n;
    log(`tenants: ${n} ${profile}: ${memoryMiB.toFixed(0)} MiB PSS per tenant with a CRD and 1,000 objects each`);
    return { tenants: n, readySeconds, memoryMiB };
  } finally {
    for (const t of tenants) t.child.kill('SIGTERM');
    await Promise.all(tenants.map((t) => (t.child.exitCode === null ? new Promise((r) => t.child.once('exit', r)) : undefined)));
    await rm(dir, { recursive: true, force: true });
  }
}

export async function tenantFigures(
  parent: string,
  log: (m: string) => void,
  counts: number[] = [1, 10, 20],
): Promise<{ rounds: TenantRound[]; full: TenantRound }> {
  const kctlBin = requireKctl();
  const full = await round(kctlBin, parent, 1, 'full', log);
  const rounds: TenantRound[] = [];
  for (const n of counts) rounds.push(await round(kctlBin, parent, n, 'api-only', log));
  return { rounds, full };
}
