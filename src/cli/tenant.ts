// kctl tenant list: every tenant control plane on this host (kctl controller --name), with its API
// URL and state, from the tenants' records and their status sockets.
import type { Command } from 'commander';
import { join } from 'node:path';
import { httpsUrl } from '../base/addresses.ts';
import { readStatus } from '../base/status-server.ts';
import type { ControllerStatusReport } from '../controller/status.ts';
import { readTenants, tenantApiAddress, tenantLayout } from '../controller/tenants.ts';
import { globals } from './support/globals.ts';
import { outputOption, printJson, renderTable, type OutputFormat } from './support/output.ts';

export interface TenantListEntry {
  name: string;
  /** running: every component runs; starting: kctl answers, some component does not run yet; stopped: no kctl. */
  state: 'running' | 'starting' | 'stopped';
  apiUrl?: string;
  pid?: number;
  ports: Record<string, number>;
  storage: string;
  dataDir: string;
}

async function entry(
  rootDataDir: string,
  rootRunDir: string,
  name: string,
  ports: Record<string, number>,
  datastore?: string,
): Promise<TenantListEntry> {
  const layout = tenantLayout(rootDataDir, rootRunDir, name);
  const report = await readStatus<ControllerStatusReport>(join(layout.runDir, 'status.sock'), 2000).catch(() => undefined);
  const address = await tenantApiAddress(layout.dataDir);
  const running = report && report.components.length > 0 && report.components.every((c) => c.state === 'running');
  return {
    name,
    state: report ? (running ? 'running' : 'starting') : 'stopped',
    apiUrl: address && ports.api ? httpsUrl(address, ports.api) : undefined,
    pid: report?.pid,
    ports,
    storage: ports.etcdClient ? 'etcd' : `kine (${datastore ?? 'sqlite'})`,
    dataDir: layout.dataDir,
  };
}

export function tenantCommands(program: Command): void {
  const tenant = program.command('tenant').description('tenant control planes on this host (kctl controller --name NAME)');
  tenant
    .command('list')
    .description('every tenant on this host: name, state, API URL, pid, storage')
    .addOption(outputOption())
    .action(async (opts: { output: OutputFormat }, cmd: Command) => {
      const g = globals(cmd);
      const records = await readTenants(join(g.rootDataDir, 'tenants'));
      const list = await Promise.all(records.map((r) => entry(g.rootDataDir, g.rootRunDir, r.name, { ...r.ports }, r.datastore)));
      if (opts.output === 'json') return printJson(list);
      if (list.length === 0) {
        process.stdout.write(`no tenants under ${join(g.rootDataDir, 'tenants')}; start one with: kctl controller --name NAME\n`);
        return;
      }
      const rows = list.map((t) => [t.name, t.state, t.apiUrl ?? '-', t.pid ? String(t.pid) : '-', t.storage]);
      process.stdout.write(renderTable(['NAME', 'STATE', 'API', 'PID', 'STORAGE'], rows).join('\n') + '\n');
    });
}
