// kctl install controller|worker, uninstall, start, stop, restart: kctl under systemd.
import { Option, type Command } from 'commander';
import { existsSync } from 'node:fs';
import { realpath, rm } from 'node:fs/promises';
import { isAbsolute, join, resolve } from 'node:path';
import { isSea } from 'node:sea';
import { UserError } from '../base/errors.ts';
import { writeFileAtomic } from '../base/fs.ts';
import { loadConfig } from '../controller/config.ts';
import { decodeToken, TokenError } from '../join/token.ts';
import {
  DEFAULT_UNIT_DIR,
  SERVICE_ROLES,
  renderUnit,
  requireDurableExecutable,
  requireSystemd,
  systemctl,
  unitName,
  unitPath,
  type ServiceRole,
} from '../supervisor/systemd.ts';
import { globals } from './globals.ts';
import { checkNodeFlags, collect, parseLabels, parseTaints, readTokenFile } from './worker.ts';

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

/** The kctl executable the unit will run: the single-file kctl, not node running a script. */
async function kctlExecutable(): Promise<string> {
  if (!isSea()) throw new UserError('kctl install must run from the kctl executable (dist/kctl), not from node and a script');
  return realpath(process.execPath);
}

/** Every check before anything is written: systemd, the executable, the unit slot. */
async function preflight(role: ServiceRole, f: CommonFlags): Promise<{ exe: string; unit: string }> {
  await requireSystemd();
  const exe = await kctlExecutable();
  await requireDurableExecutable(exe);
  const unit = unitPath(f.unitDir, role);
  if (existsSync(unit) && !f.force) throw new UserError(`${unit} already exists; kctl uninstall first, or install --force to replace it`);
  if (!existsSync(f.unitDir)) throw new UserError(`unit directory ${f.unitDir} does not exist`);
  return { exe, unit };
}

/** Writes the unit, reloads systemd and enables it; a failure removes what this install wrote. */
async function writeAndEnable(role: ServiceRole, unit: string, text: string, written: string[]): Promise<void> {
  try {
    await writeFileAtomic(unit, text, 0o644);
    written.push(unit);
    await systemctl(['daemon-reload']);
    await systemctl(['enable', unitName(role)]);
  } catch (err) {
    for (const f of written) await rm(f, { force: true });
    await systemctl(['daemon-reload'], { reject: false });
    throw err;
  }
  process.stdout.write(`installed ${unit} (enabled); start it with: kctl start\n`);
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
      .addOption(new Option('--storage <type>', 'storage backend (overrides spec.storage.type)').choices(['etcd', 'kine'])),
  ).action(async (f: CommonFlags & { config?: string; single?: boolean; storage?: 'etcd' | 'kine' }, cmd: Command) => {
    const g = globals(cmd);
    const { exe, unit } = await preflight('controller', f);
    const env = parseEnv(f.env);
    const config = f.config ? abs(f.config) : undefined;
    await loadConfig(config, f); // a bad config is refused now, not at the next boot
    const args = ['controller', '--data-dir', abs(g.dataDir), '--run-dir', abs(g.runDir)];
    if (config) args.push('--config', config);
    if (f.single) args.push('--single');
    if (f.storage) args.push('--storage', f.storage);
    await writeAndEnable('controller', unit, renderUnit({ role: 'controller', execStart: [exe, ...args], env }), []);
  });
}

interface WorkerInstallFlags extends CommonFlags {
  tokenFile?: string;
  nodeName?: string;
  nodeIp?: string;
  labels: string[];
  taints: string[];
}

function installWorker(install: Command): void {
  commonOptions(
    install
      .command('worker')
      .description('install kctl-worker.service: a node joined with a token, started at boot')
      .requiredOption('--token-file <file>', 'join token file (kctl token create --role worker); copied once into the data dir, 0600')
      .option('--node-name <name>', 'node name (default: host name)')
      .option('--node-ip <ip>', "node address (default: this host's address towards the API server)")
      .option('--labels <k=v>', 'node labels (repeat or comma-separate)', collect, [])
      .option('--taints <key=value:Effect>', 'node taints (repeat or comma-separate)', collect, []),
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
    await writeAndEnable('worker', unit, renderUnit({ role: 'worker', execStart: [exe, ...args], env }), written);
  });
}

/** The role whose unit is installed in `unitDir`; one clear line when none or both are. */
function installedRole(unitDir: string): ServiceRole {
  const roles = SERVICE_ROLES.filter((r) => existsSync(unitPath(unitDir, r)));
  if (roles.length === 0) throw new UserError(`no kctl service is installed in ${unitDir}; run kctl install controller or kctl install worker first`);
  if (roles.length > 1)
    throw new UserError(`both ${roles.map(unitName).join(' and ')} are installed in ${unitDir}; use systemctl with the unit name`);
  return roles[0]!;
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
  kctl stop | kctl restart | kctl uninstall      (data stays; kctl reset removes it)`,
    );
  installController(install);
  installWorker(install);

  program
    .command('uninstall')
    .description('stop and disable the installed kctl service and remove its unit (data stays: kctl reset removes it)')
    .option('--unit-dir <dir>', 'where the unit is', DEFAULT_UNIT_DIR)
    .action(async (f: { unitDir: string }) => {
      await requireSystemd();
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
      .action(async (f: { unitDir: string }) => {
        await requireSystemd();
        await systemctl([verb, unitName(installedRole(f.unitDir))]);
      });
  }
}
