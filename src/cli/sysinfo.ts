// kctl sysinfo: the pre-flight checks of this host for a role, pass / warn / fail with a reason
// each; exits non-zero when any fails. kctl controller / worker refuse on the same failures.
import { Option, type Command } from 'commander';
import { controllerPorts } from '../controller/components/ports.ts';
import { loadConfig } from '../controller/config/config.ts';
import { hostChecks, ownPids, type Check, type HostRole } from '../host/checks.ts';
import { WORKER_PORTS } from '../worker/index.ts';
import { globals } from './support/globals.ts';
import { outputOption, printJson, type OutputFormat } from './support/output.ts';

export interface SysinfoReport {
  role: HostRole;
  dataDir: string;
  /** False when any check failed. */
  ok: boolean;
  checks: Check[];
}

export function renderChecks(checks: Check[]): string {
  const w = Math.max(5, ...checks.map((c) => c.name.length));
  return (
    [
      'CHECK'.padEnd(w) + '  RESULT  DETAIL',
      ...checks.map((c) => `${c.name.padEnd(w)}  ${c.result.toUpperCase().padEnd(6)}  ${c.detail}`),
    ].join('\n') + '\n'
  );
}

export function sysinfoCommand(program: Command): void {
  program
    .command('sysinfo')
    .description('check whether this host can run a controller or a worker (kernel, cgroups, ports, disk, memory, ...)')
    .addOption(
      new Option('--role <role>', 'the role to check for').choices(['controller', 'worker']).default('controller'),
    )
    .option('--config <file>', 'controller config, for its ports (default: the default config)')
    .addOption(outputOption())
    .addHelpText(
      'after',
      '\nExits 1 when a check fails; kctl controller / kctl worker refuse to start on the same failures.',
    )
    .action(async (f: { role: HostRole; config?: string; output: OutputFormat }, cmd: Command) => {
      const g = globals(cmd);
      const ports = f.role === 'controller' ? controllerPorts(await loadConfig(f.config)) : WORKER_PORTS;
      const checks = await hostChecks({ role: f.role, dataDir: g.dataDir, ports, ownPids: await ownPids(g.runDir) });
      const report: SysinfoReport = {
        role: f.role,
        dataDir: g.dataDir,
        ok: !checks.some((c) => c.result === 'fail'),
        checks,
      };
      if (f.output === 'json') printJson(report);
      else process.stdout.write(renderChecks(checks));
      if (!report.ok) process.exitCode = 1;
    });
}
