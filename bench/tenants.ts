// API-only tenant figures, kctl only: N tenants on this host (kctl controller --name), each with
// its own ports (picked by kctl), data dir and CA, sharing one staged bin dir, started at once.
//
// tenant-ready-s (n): seconds from spawning `kctl controller` to the tenant's /readyz answering
//   200; with n > 1, the slowest of the n started together.
// tenant-memory-mb (n): per tenant, the proportional set size (PSS) of its processes (kctl, kine,
//   kube-apiserver, kube-controller-manager) after a CRD and 1,000 custom objects were created in
//   it and 15 s passed, averaged over the n tenants. PSS splits pages shared between processes
//   (the executables' code) among them, so this is the tenant's share of the host's memory,
//   its kctl process included. The same figure for one full-profile controller on kine (what an
//   operator ran before the api-only profile) is measured in the same run for the ratio.
// tenant-restart-s (n): the same n tenants stopped and started again together (their PKI, ports
//   and data exist): seconds from spawning to the slowest /readyz.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa } from 'execa';
import type { ControllerStatusReport } from '../src/controller/leases/status.ts';
import { readTenant } from '../src/controller/tenants/tenants.ts';
import { totalPssKiB } from '../src/host/memory.ts';
import { requireKctl } from '../test/e2e/lab/kctl.ts';
import { apiStatus, createWidgets } from '../test/e2e/lab/tenant-api.ts';

const BASE_PORT = 13000;

export interface TenantRound {
  tenants: number;
  /** Slowest spawn-to-/readyz of the round's first start, seconds. */
  readySeconds: number;
  /** The same after every tenant was stopped and started again together. */
  restartSeconds: number;
  /** Mean PSS per tenant, MiB. */
  memoryMiB: number;
}

interface Tenant {
  /** kctl's global flags that address this tenant (status, kubectl). */
  cli: string[];
  /** What `kctl` is spawned with to run it. */
  args: string[];
  port: number;
  dataDir: string;
  child?: ChildProcess;
}

async function status(kctlBin: string, t: Tenant): Promise<ControllerStatusReport | undefined> {
  const r = await execa(kctlBin, [...t.cli, 'status', '-o', 'json'], { reject: false });
  return r.exitCode === 0 ? (JSON.parse(r.stdout) as ControllerStatusReport) : undefined;
}

async function tenantPssMiB(kctlBin: string, t: Tenant): Promise<number> {
  const s = await status(kctlBin, t);
  const pids = s ? [s.pid, ...s.components.flatMap((c) => (c.pid ? [c.pid] : []))] : [];
  return (await totalPssKiB(pids)) / 1024;
}

/**
 * `n` tenants of one host (kctl controller --name): one staged bin dir for all, ports from the
 * range. The bin dir is staged before the clock starts, as it is on a host that runs tenants.
 */
async function tenantsOfHost(kctlBin: string, dir: string, n: number): Promise<Tenant[]> {
  const root = ['--data-dir', join(dir, 'host'), '--run-dir', join(dir, 'host-run')];
  await execa(kctlBin, [...root, 'controller', '--init-only', '--api-only']);
  const config = join(dir, 'tenant.yaml');
  await writeFile(config, 'spec:\n  api: { address: 127.0.0.1 }\n');
  return Array.from({ length: n }, (_, i) => ({
    cli: [...root, '--name', `t${i}`],
    args: [
      ...root,
      '--name',
      `t${i}`,
      'controller',
      '--config',
      config,
      '--port-range',
      `${BASE_PORT}-${BASE_PORT + 999}`,
    ],
    port: 0,
    dataDir: join(dir, 'host', 'tenants', `t${i}`),
  }));
}

/** One full-profile controller on kine with its own config ports (what operators ran before the api-only profile). */
async function fullController(kctlBin: string, dir: string): Promise<Tenant[]> {
  const port = BASE_PORT;
  const config = join(dir, 'full.yaml');
  await writeFile(
    config,
    `spec:\n  storage: { type: kine }\n  controllerManager: { port: ${port + 1} }\n  scheduler: { port: ${port + 2} }\n  konnectivity: { agentPort: ${port + 3}, adminPort: ${port + 4} }\n  api: { address: 127.0.0.1, port: ${port}, joinPort: ${port + 5} }\n`,
  );
  const cli = ['--data-dir', join(dir, 'full-data'), '--run-dir', join(dir, 'full-run')];
  await execa(kctlBin, [...cli, 'controller', '--init-only', '--config', config]);
  // Staged before the clock starts, like the tenants' bin dir; its PKI is made by the start, like theirs.
  await rm(join(dir, 'full-data', 'pki'), { recursive: true });
  return [{ cli, args: [...cli, 'controller', '--config', config], port, dataDir: join(dir, 'full-data') }];
}

/** Spawns every tenant at once; seconds until the slowest answers /readyz 200. */
async function startAll(kctlBin: string, tenants: Tenant[]): Promise<number> {
  const spawned = Date.now();
  for (const t of tenants) t.child = spawn(kctlBin, t.args, { stdio: 'ignore' });
  const readyAt = await Promise.all(
    tenants.map(async (t) => {
      const caFile = join(t.dataDir, 'pki', 'ca.crt');
      for (;;) {
        if (t.child!.exitCode !== null) throw new Error(`tenant ${t.dataDir} exited (${t.child!.exitCode})`);
        if (Date.now() - spawned > 300_000) throw new Error(`tenant ${t.dataDir} not ready in 300 s`);
        t.port ||= (await readTenant(t.dataDir))?.ports.api ?? 0;
        const ca = t.port && existsSync(caFile) ? await readFile(caFile, 'utf8') : null;
        if (ca && (await apiStatus(t.port, '/readyz', { ca, timeoutMs: 2000 }).catch(() => 0)) === 200)
          return Date.now();
        await sleep(50);
      }
    }),
  );
  return (Math.max(...readyAt) - spawned) / 1000;
}

async function stopAll(tenants: Tenant[]): Promise<void> {
  for (const t of tenants) t.child?.kill('SIGTERM');
  await Promise.all(
    tenants.map((t) =>
      t.child && t.child.exitCode === null ? new Promise((r) => t.child!.once('exit', r)) : undefined,
    ),
  );
}

/** One round: `n` tenants (profile `profile`) started together, filled, measured, restarted, stopped. */
async function round(
  kctlBin: string,
  parent: string,
  n: number,
  profile: 'api-only' | 'full',
  log: (m: string) => void,
): Promise<TenantRound> {
  const dir = await mkdtemp(join(parent, `tenants-${n}-`));
  const tenants = profile === 'api-only' ? await tenantsOfHost(kctlBin, dir, n) : await fullController(kctlBin, dir);
  try {
    const readySeconds = await startAll(kctlBin, tenants);
    log(`tenants: ${n} ${profile} ready, the slowest after ${readySeconds.toFixed(1)} s`);
    // The controller logs ready once its controller-manager runs too; wait for that before filling.
    for (const t of tenants)
      for (let i = 0; i < 300; i++) {
        if ((await status(kctlBin, t))?.components.every((c) => c.state === 'running')) break;
        await sleep(200);
      }
    // Five tenants filled at a time: twenty kubectl loops at once on two cores hit client timeouts.
    for (let i = 0; i < tenants.length; i += 5)
      await Promise.all(
        tenants
          .slice(i, i + 5)
          .map((t) =>
            createWidgets(
              (args, input) => execa(kctlBin, [...t.cli, 'kubectl', ...args], { input, reject: false }),
              1000,
            ),
          ),
      );
    await sleep(15_000);
    let total = 0;
    for (const t of tenants) total += await tenantPssMiB(kctlBin, t);
    const memoryMiB = total / n;
    log(`tenants: ${n} ${profile}: ${memoryMiB.toFixed(0)} MiB PSS per tenant with a CRD and 1,000 objects each`);
    await stopAll(tenants);
    const restartSeconds = await startAll(kctlBin, tenants);
    log(`tenants: ${n} ${profile} restarted together, the slowest ready after ${restartSeconds.toFixed(1)} s`);
    return { tenants: n, readySeconds, restartSeconds, memoryMiB };
  } finally {
    await stopAll(tenants);
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
