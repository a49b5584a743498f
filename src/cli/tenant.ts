// kctl tenant list: every tenant control plane on this host (kctl controller --name), with its
// profile, state, version, API URL, nodes and agents (full clusters), storage and memory (PSS of kctl
// and its components), from the tenants' records and their status sockets.
import type { Command } from 'commander';
import { join } from 'node:path';
import { httpsUrl } from '../base/addresses.ts';
import { readStatus } from '../base/status-server.ts';
import type { ControllerStatusReport } from '../controller/leases/status.ts';
import type { NodeCounts } from '../controller/nodes/nodes.ts';
import { readTenants, tenantApiAddress, tenantLayout, type TenantRecord } from '../controller/tenants/tenants.ts';
import { totalPssKiB } from '../host/memory.ts';
import { globals } from './support/globals.ts';
import { outputOption, printJson, renderTable, type OutputFormat } from './support/output.ts';

export interface TenantListEntry {
  name: string;
  profile: 'api-only' | 'full';
  /** running: every component runs; starting: kctl answers, some component does not run yet; stopped: no kctl. */
  state: 'running' | 'starting' | 'stopped';
  /** The running kctl's version. */
  version?: string;
  apiUrl?: string;
  pid?: number;
  ports: Record<string, number>;
  /** A running full cluster's Nodes. */
  nodes?: NodeCounts;
  /** A running full cluster's konnectivity agents connected to this host's server. */
  agents?: number;
  storage: string;
  /** PSS of the tenant's kctl and its components, MiB (shared pages split between the processes that map them). */
  memoryMiB?: number;
  dataDir: string;
}

async function entry(rootDataDir: string, rootRunDir: string, r: TenantRecord): Promise<TenantListEntry> {
  const layout = tenantLayout(rootDataDir, rootRunDir, r.name);
  const ports: Record<string, number> = { ...r.ports };
  const report = await readStatus<ControllerStatusReport>(join(layout.runDir, 'status.sock'), 2000).catch(
    () => undefined,
  );
  const address = await tenantApiAddress(layout.dataDir);
  const running = report && report.components.length > 0 && report.components.every((c) => c.state === 'running');
  const pids = report ? [report.pid, ...report.components.flatMap((c) => (c.pid ? [c.pid] : []))] : [];
  return {
    name: r.name,
    profile: r.profile ?? 'api-only',
    state: report ? (running ? 'running' : 'starting') : 'stopped',
    version: report?.version,
    apiUrl: address && ports.api ? httpsUrl(address, ports.api) : undefined,
    pid: report?.pid,
    ports,
    nodes: report?.nodes,
    agents: report?.konnectivity?.agents.length,
    storage: ports.etcdClient ? 'etcd' : `kine (${r.datastore ?? 'sqlite'})`,
    memoryMiB: report ? Math.round((await totalPssKiB(pids)) / 1024) : undefined,
    dataDir: layout.dataDir,
  };
}

const orDash = (v: string | number | undefined): string => (v === undefined ? '-' : String(v));

export function tenantCommands(program: Command): void {
  const tenant = program
    .command('tenant')
    .description('tenant control planes on this host (kctl controller --name NAME)');
  tenant
    .command('list')
    .description(
      'every tenant on this host: profile, state, version, API URL, nodes Ready/total, agents, storage, memory (PSS), pid',
    )
    .addOption(outputOption())
    .action(async (opts: { output: OutputFormat }, cmd: Command) => {
      const g = globals(cmd);
      const records = await readTenants(join(g.rootDataDir, 'tenants'));
      const list = await Promise.all(records.map((r) => entry(g.rootDataDir, g.rootRunDir, r)));
      if (opts.output === 'json') return printJson(list);
      if (list.length === 0) {
        process.stdout.write(
          `no tenants under ${join(g.rootDataDir, 'tenants')}; start one with: kctl controller --name NAME\n`,
        );
        return;
      }
      const rows = list.map((t) => [
        t.name,
        t.profile,
        t.state,
        orDash(t.version),
        orDash(t.apiUrl),
        t.nodes ? `${t.nodes.ready}/${t.nodes.total}` : '-',
        orDash(t.agents),
        t.storage,
        t.memoryMiB === undefined ? '-' : `${t.memoryMiB}Mi`,
        orDash(t.pid),
      ]);
      const header = ['NAME', 'PROFILE', 'STATE', 'VERSION', 'API', 'NODES', 'AGENTS', 'STORAGE', 'MEMORY', 'PID'];
      process.stdout.write(renderTable(header, rows).join('\n') + '\n');
    });
}
