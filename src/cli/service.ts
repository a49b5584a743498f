// kctl install controller|worker, uninstall, start, stop, restart: kctl under systemd.
import { Option, type Command } from 'commander';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, realpath, rm } from 'node:fs/promises';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { UserError } from '../base/errors.ts';
import { kctlExecutable } from '../base/executable.ts';
import { writeFileAtomic } from '../base/fs.ts';
import { loadConfig } from '../controller/config/config.ts';
import { decodeToken, TokenError } from '../join/token.ts';
import {
  DEFAULT_UNIT_DIR,
  SERVICE_ROLES,
  TENANT_TEMPLATE,
  renderTenantDropIn,
  renderUnit,
  tenantDropIn,
  tenantUnitName,
  requireDurableExecutable,
  requireSystemd,
  systemctl,
  unitName,
  unitPath,
  type ServiceRole,
} from '../supervisor/systemd.ts';
import { DEFAULT_PORT_RANGE, parsePortRange } from '../controller/tenants/tenants.ts';
import { globals, type GlobalOptions } from './support/globals.ts';
import { DEFAULT_HOST_STATE_DIR, hostStateDir } from '../host/port-claims.ts';
import { checkNodeFlags, collect, parseLabels, parseTaints, PROFILE_HELP, readTokenFile } from './worker.ts';

/** Where `kctl install worker` keeps the join token (0600); the unit names only this path. */
export const TOKEN_FILE = 'join-token';

const collectOne = (v: string, prev: string[]) => [...prev, v];

interface CommonFlags {
  env: string[];
  force?: boolean;
  unitDir: string;
}

function parseEnv(items: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const item of items) {
    const m = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/s.exec(item);
    if (!m || /[\n\r]/.test(m[2]!)) throw new UserError(`--env "${item}" is not NAME=value (one line)`);
    out[m[1]!] = m[2]!;
  }
  return out;
}

/** The kctl executable the unit will run: the single-file kctl, not node running a script nor its unpacked runtime. */
async function unitExecutable(): Promise<string> {
  const exe = kctlExecutable();
  if (!exe)
    throw new UserError('kctl install must run from the kctl executable (dist/kctl), not from node and a script');
  return realpath(exe);
}

/** Every check before anything is written: systemd, the executable, the unit slot. */
async function preflight(role: ServiceRole, f: CommonFlags): Promise<{ exe: string; unit: string }> {
  await requireSystemd();
  const exe = await unitExecutable();
  await requireDurableExecutable(exe);
  const unit = unitPath(f.unitDir, role);
  if (existsSync(unit) && !f.force)
    throw new UserError(`${unit} already exists; kctl uninstall first, or install --force to replace it`);
  if (!existsSync(f.unitDir)) throw new UserError(`unit directory ${f.unitDir} does not exist`);
  return { exe, unit };
}

/** Writes the unit files, reloads systemd and enables `name`; a failure removes what this install wrote. */
async function writeAndEnable(
  name: string,
  files: [path: string, text: string][],
  written: string[],
  start: string,
): Promise<void> {
  try {
    for (const [path, text] of files) {
      await mkdir(dirname(path), { recursive: true, mode: 0o755 });
      await writeFileAtomic(path, text, 0o644);
      written.push(path);
    }
    await systemctl(['daemon-reload']);
    await systemctl(['enable', name]);
  } catch (err) {
    for (const f of written) await rm(f, { force: true });
    await systemctl(['daemon-reload'], { reject: false });
    throw err;
  }
  process.stdout.write(`installed ${name} (enabled); start it with: ${start}\n`);
}

interface ControllerInstallFlags extends CommonFlags {
  config?: string;
  single?: boolean;
  storage?: 'etcd' | 'kine';
  portRange?: string;
}

/** Tenants enabled in `unitDir` (their wants links), other than `except`. */
async function enabledTenants(unitDir: string, except?: string): Promise<string[]> {
  const wants = await readdir(join(unitDir, 'multi-user.target.wants')).catch(() => [] as string[]);
  return wants.filter((n) => n.startsWith('kctl-controller@') && n !== (except && tenantUnitName(except)));
}

/**
 * kctl install controller --name NAME: the shared template kctl-controller@.service (written once)
 * and, for a tenant's own --config, --port-range or --env, a drop-in for its instance.
 */
async function installTenant(g: GlobalOptions, f: ControllerInstallFlags): Promise<void> {
  const name = g.tenant!.name;
  await requireSystemd();
  const exe = await unitExecutable();
  await requireDurableExecutable(exe);
  if (!existsSync(f.unitDir)) throw new UserError(`unit directory ${f.unitDir} does not exist`);
  const env = parseEnv(f.env);
  const config = f.config ? abs(f.config) : undefined;
  await loadConfig(config, { storage: f.storage, tenantName: name }); // a bad config is refused now, not at the next boot
  if (f.portRange) parsePortRange(f.portRange);
  const unit = tenantUnitName(name);
  const dropIn = tenantDropIn(f.unitDir, name);
  if (!f.force && (existsSync(dropIn) || (await systemctl(['is-enabled', unit], { reject: false })).ok))
    throw new UserError(
      `${unit} is already installed; kctl uninstall --name ${name} first, or install --force to replace it`,
    );
  const template = join(f.unitDir, TENANT_TEMPLATE);
  const base = [
    exe,
    'controller',
    '--data-dir',
    abs(g.rootDataDir),
    '--run-dir',
    abs(g.rootRunDir),
    // Set for this process from --host-state-dir before the command ran (cli/program.ts).
    ...(hostStateDir() === DEFAULT_HOST_STATE_DIR ? [] : ['--host-state-dir', abs(hostStateDir())]),
  ];
  const text = renderUnit({ role: 'controller', execStart: base, env: {}, template: true });
  const current = await readFile(template, 'utf8').catch(() => undefined);
  if (current !== undefined && current !== text && !f.force)
    throw new UserError(
      `${template} exists with other settings (another kctl executable or data dir); install --force replaces it for every tenant`,
    );
  const own = [
    ...(config ? ['--config', config] : []),
    ...(f.storage ? ['--storage', f.storage] : []),
    ...(f.portRange ? ['--port-range', f.portRange] : []),
  ];
  const files: [string, string][] = [];
  if (current !== text) files.push([template, text]);
  if (own.length || Object.keys(env).length)
    files.push([dropIn, renderTenantDropIn([...base, '--name', name, ...own], env)]);
  else await rm(dropIn, { force: true });
  await writeAndEnable(unit, files, [], `kctl start --name ${name}`);
}

const abs = (p: string): string => (isAbsolute(p) ? p : resolve(p));

function commonOptions(cmd: Command): Command {
  return cmd
    .option('--env <NAME=value>', 'an environment variable for the service (repeat); not for secrets', collectOne, [])
    .option('--force', 'replace a unit that exists')
    .option('--unit-dir <dir>', 'where to write the unit', DEFAULT_UNIT_DIR);
}

function installController(install: Command): void {
  commonOptions(
    install
      .command('controller')
      .description('install kctl-controller.service: the control plane on this host, started at boot')
      .option('--config <file>', 'ClusterConfig YAML file (checked now; the service reads it at every start)')
      .option('--single', 'single-host control plane; storage defaults to kine (SQLite)')
      .addOption(
        new Option('--storage <type>', 'storage backend (overrides spec.storage.type)').choices(['etcd', 'kine']),
      )
      .option(
        '--port-range <from-to>',
        `with --name: where the tenant's ports are picked on its first start (default ${DEFAULT_PORT_RANGE})`,
      ),
  ).action(async (f: ControllerInstallFlags, cmd: Command) => {
    const g = globals(cmd);
    if (g.tenant) return installTenant(g, f);
    const { exe, unit } = await preflight('controller', f);
    const env = parseEnv(f.env);
    const config = f.config ? abs(f.config) : undefined;
    await loadConfig(config, f); // a bad config is refused now, not at the next boot
    const args = ['controller', '--data-dir', abs(g.dataDir), '--run-dir', abs(g.runDir)];
    if (config) args.push('--config', config);
    if (f.single) args.push('--single');
    if (f.storage) args.push('--storage', f.storage);
    await writeAndEnable(
      unitName('controller'),
      [[unit, renderUnit({ role: 'controller', execStart: [exe, ...args], env })]],
      [],
      'kctl start',
    );
  });
}

interface WorkerInstallFlags extends CommonFlags {
  tokenFile?: string;
  nodeName?: string;
  nodeIp?: string;
  labels: string[];
  taints: string[];
  networkRelay?: boolean;
  profile?: string;
}

function installWorker(install: Command): void {
  commonOptions(
    install
      .command('worker')
      .description('install kctl-worker.service: a node joined with a token, started at boot')
      .requiredOption(
        '--token-file <file>',
        'join token file (kctl token create --role worker); copied once into the data dir, 0600',
      )
      .option('--node-name <name>', 'node name (default: host name)')
      .option('--node-ip <ip>', "node address (default: this host's address towards the API server)")
      .option('--labels <k=v>', 'node labels (repeat or comma-separate)', collect, [])
      .option('--taints <key=value:Effect>', 'node taints (repeat or comma-separate)', collect, [])
      .option('--profile <name>', PROFILE_HELP)
      .option(
        '--network-relay',
        'in wireguard mode, carry pod traffic between nodes that cannot reach each other (see kctl worker --help)',
      ),
  ).action(async (f: WorkerInstallFlags, cmd: Command) => {
    const g = globals(cmd);
    const { exe, unit } = await preflight('worker', f);
    const env = parseEnv(f.env);
    const tokenText = await readTokenFile(f.tokenFile!);
    try {
      decodeToken(tokenText);
    } catch (err) {
      if (err instanceof TokenError) throw new UserError(`--token-file ${f.tokenFile}: ${err.message}`);
      throw err;
    }
    checkNodeFlags(f);
    const labels = Object.entries(parseLabels(f.labels)).map(([k, v]) => `${k}=${v}`);
    parseTaints(f.taints);
    const dataDir = abs(g.dataDir);
    // The secret stays in the data dir; the unit, ps and the logs see only its path.
    const tokenFile = join(dataDir, TOKEN_FILE);
    if (g.tenant)
      throw new UserError(
        '--name names a tenant control plane (kctl install controller --name); a worker takes --node-name',
      );
    const written: string[] = [];
    if (!existsSync(tokenFile) || f.force) {
      await writeFileAtomic(tokenFile, tokenText.trim() + '\n', 0o600);
      written.push(tokenFile);
    }
    const args = ['worker', '--data-dir', dataDir, '--run-dir', abs(g.runDir), '--token-file', tokenFile];
    if (f.nodeName) args.push('--node-name', f.nodeName);
    if (f.nodeIp) args.push('--node-ip', f.nodeIp);
    if (labels.length) args.push('--labels', labels.join(','));
    if (f.taints.length) args.push('--taints', f.taints.join(','));
    if (f.networkRelay) args.push('--network-relay');
    if (f.profile) args.push('--profile', f.profile);
    await writeAndEnable(
      unitName('worker'),
      [[unit, renderUnit({ role: 'worker', execStart: [exe, ...args], env })]],
      written,
      'kctl start',
    );
  });
}

/** The role whose unit is installed in `unitDir`; one clear line when none or both are. */
function installedRole(unitDir: string): ServiceRole {
  const roles = SERVICE_ROLES.filter((r) => existsSync(unitPath(unitDir, r)));
  if (roles.length === 0)
    throw new UserError(
      `no kctl service is installed in ${unitDir}; run kctl install controller or kctl install worker first`,
    );
  if (roles.length > 1)
    throw new UserError(
      `both ${roles.map(unitName).join(' and ')} are installed in ${unitDir}; use systemctl with the unit name`,
    );
  return roles[0]!;
}

/** The tenant's instance, when the template is installed in `unitDir`. */
function installedTenant(unitDir: string, tenant: string): string {
  if (!existsSync(join(unitDir, TENANT_TEMPLATE)))
    throw new UserError(
      `${tenantUnitName(tenant)} is not installed in ${unitDir}; run kctl install controller --name ${tenant} first`,
    );
  return tenantUnitName(tenant);
}

/** Stops and disables the tenant's instance and removes its drop-in; the template goes with the last tenant. */
async function uninstallTenant(unitDir: string, tenant: string): Promise<void> {
  const unit = installedTenant(unitDir, tenant);
  await systemctl(['disable', '--now', unit]);
  await rm(dirname(tenantDropIn(unitDir, tenant)), { recursive: true, force: true });
  const last = (await enabledTenants(unitDir, tenant)).length === 0;
  if (last) await rm(join(unitDir, TENANT_TEMPLATE), { force: true });
  await systemctl(['daemon-reload']);
  process.stdout.write(
    `removed ${unit}${last ? ` and ${join(unitDir, TENANT_TEMPLATE)}` : ''}; the tenant's data stays (kctl reset --name ${tenant} removes it)\n`,
  );
}

export function serviceCommands(program: Command): void {
  const install = program
    .command('install')
    .description('install kctl as a systemd service (controller or worker), enabled at boot')
    .addHelpText(
      'after',
      `
The unit (${DEFAULT_UNIT_DIR}/kctl-<role>.service) runs this kctl executable with the flags given
here and the global --data-dir / --run-dir. Type=notify: \`systemctl start\` returns once the
controller's API is ready, or the worker's node is Ready; \`systemctl status\` shows progress.
A watchdog restarts a kctl that hangs. Logs: journalctl -u kctl-<role>.

Examples:
  kctl install controller --config /etc/kctl/kctl.yaml && kctl start
  kctl install worker --token-file ./token --node-name edge-1 && kctl start
  kctl stop | kctl restart | kctl uninstall      (data stays; kctl reset removes it)

Tenants (control planes of many on one host, kctl controller --name): one template unit,
kctl-controller@.service, and an instance per tenant, with the tenant's own flags in a drop-in
(kctl-controller@NAME.service.d/10-kctl.conf):
  kctl install controller --name team-a --config /etc/kctl/team-a.yaml && kctl start --name team-a
  kctl stop --name team-a | kctl restart --name team-a | kctl uninstall --name team-a`,
    );
  installController(install);
  installWorker(install);

  program
    .command('uninstall')
    .description('stop and disable the installed kctl service and remove its unit (data stays: kctl reset removes it)')
    .option('--unit-dir <dir>', 'where the unit is', DEFAULT_UNIT_DIR)
    .action(async (f: { unitDir: string }, cmd: Command) => {
      await requireSystemd();
      const tenant = globals(cmd).tenant?.name;
      if (tenant) return uninstallTenant(f.unitDir, tenant);
      const role = installedRole(f.unitDir);
      await systemctl(['disable', '--now', unitName(role)]);
      await rm(unitPath(f.unitDir, role), { force: true });
      await systemctl(['daemon-reload']);
      process.stdout.write(`removed ${unitPath(f.unitDir, role)}; the data dir stays (kctl reset removes it)\n`);
    });

  for (const [verb, what] of [
    ['start', 'start the installed kctl service; returns once it is ready'],
    ['stop', 'stop the installed kctl service (components stop in reverse order)'],
    ['restart', 'restart the installed kctl service (a worker keeps its containers running)'],
  ] as const) {
    program
      .command(verb)
      .description(what)
      .option('--unit-dir <dir>', 'where the unit is', DEFAULT_UNIT_DIR)
      .action(async (f: { unitDir: string }, cmd: Command) => {
        await requireSystemd();
        const tenant = globals(cmd).tenant?.name;
        await systemctl([verb, tenant ? installedTenant(f.unitDir, tenant) : unitName(installedRole(f.unitDir))]);
      });
  }
}
