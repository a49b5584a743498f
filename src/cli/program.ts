// The commander tree of every kctl command but the drop-ins and the staging child (main.ts).
// Each command's module is loaded only when that command runs: the bundle is one script, and a
// module's top-level code (and everything it imports) costs memory for the life of the process.
// `kctl worker` so loads the worker and not the controller, PKI, etcd or backup code.
import { Command, CommanderError } from 'commander';
import { KCTL_VERSION } from '../base/version.ts';
import { reportAndExit } from './support/errors.ts';
import { DEFAULT_DATA_DIR, DEFAULT_RUN_DIR } from './support/globals.ts';
import { DEFAULT_HOST_STATE_DIR, useHostStateDir } from '../host/port-claims.ts';

type Register = (program: Command) => void;

/** Every command, in the order of `kctl --help`: the names it registers and how to load it. */
export const COMMANDS: readonly { names: readonly string[]; load: () => Promise<Register> }[] = [
  { names: ['version'], load: async () => (await import('./version.ts')).versionCommand },
  { names: ['controller'], load: async () => (await import('./controller.ts')).controllerCommand },
  { names: ['worker'], load: async () => (await import('./worker.ts')).workerCommand },
  { names: ['status'], load: async () => (await import('./status.ts')).statusCommand },
  { names: ['kubeconfig'], load: async () => (await import('./kubeconfig.ts')).kubeconfigCommand },
  { names: ['kubectl'], load: async () => (await import('./kubeconfig.ts')).kubectlCommand },
  { names: ['config'], load: async () => (await import('./kubeconfig.ts')).configCommand },
  { names: ['token'], load: async () => (await import('./token.ts')).tokenCommand },
  { names: ['etcd'], load: async () => (await import('./etcd.ts')).etcdCommands },
  { names: ['tenant'], load: async () => (await import('./tenant.ts')).tenantCommands },
  {
    names: ['konnectivity-agent'],
    load: async () => (await import('./konnectivity-agent.ts')).konnectivityAgentCommand,
  },
  {
    names: ['konnectivity-server'],
    load: async () => (await import('./konnectivity-server.ts')).konnectivityServerCommand,
  },
  { names: ['airgap'], load: async () => (await import('./airgap.ts')).airgapCommand },
  { names: ['reset'], load: async () => (await import('./reset.ts')).resetCommand },
  {
    names: ['install', 'uninstall', 'start', 'stop', 'restart'],
    load: async () => (await import('./service.ts')).serviceCommands,
  },
  { names: ['sysinfo'], load: async () => (await import('./sysinfo.ts')).sysinfoCommand },
  { names: ['pki'], load: async () => (await import('./pki.ts')).pkiCommand },
  { names: ['secrets'], load: async () => (await import('./secrets.ts')).secretsCommand },
  { names: ['backup', 'restore'], load: async () => (await import('./backup.ts')).backupCommands },
  { names: ['upgrade'], load: async () => (await import('./upgrade.ts')).upgradeCommand },
  { names: ['operator'], load: async () => (await import('./operator.ts')).operatorCommand },
  { names: ['cluster'], load: async () => (await import('./cluster.ts')).clusterCommand },
];

/** Global options that take a value: the word after them is not the command. */
const VALUE_OPTIONS = ['--data-dir', '--run-dir', '--name', '--host-state-dir'];

/** The command `argv` runs, if it names one; undefined for `kctl --help`, `kctl`, a typo. */
export function commandOf(argv: readonly string[]): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (VALUE_OPTIONS.includes(a)) i++;
    else if (!a.startsWith('-')) return a;
  }
  return undefined;
}

/** The tree with the command `argv` runs, or with every command when it names none. */
export async function buildProgram(argv: readonly string[] = []): Promise<Command> {
  const name = commandOf(argv);
  const program = new Command('kctl').description(
    'kctl: a single-binary Kubernetes distribution for remote control planes',
  );
  // Only without a command: commander would otherwise take `kctl upgrade plan --version V` as its own.
  if (name === undefined) program.version(KCTL_VERSION, '--version', 'print the kctl version');
  program
    .option('--data-dir <dir>', 'where kctl keeps its state', DEFAULT_DATA_DIR)
    .option('--run-dir <dir>', 'pid files and sockets (status.sock)', DEFAULT_RUN_DIR)
    .option(
      '--name <tenant>',
      'a tenant control plane on this host (kctl controller --name): its dirs are <data-dir>/tenants/NAME and <run-dir>/tenants/NAME',
    )
    .option(
      '--host-state-dir <dir>',
      "where this host's tenant control planes claim their ports, whatever their --data-dir",
      DEFAULT_HOST_STATE_DIR,
    )
    .option('--debug', 'debug logs and stack traces on errors')
    .hook('preAction', (_, action) => useHostStateDir(action.optsWithGlobals<{ hostStateDir: string }>().hostStateDir))
    .showSuggestionAfterError()
    .exitOverride()
    .configureOutput({
      // commander's own errors: one line, then a pointer to usage.
      outputError: (str, write) => write(`kctl: ${str.replace(/^error: /, '').trim()}\n`),
    });
  program.showHelpAfterError(`usage: kctl ${program.usage()}  (kctl --help for more)`);
  const one = COMMANDS.find((c) => name !== undefined && c.names.includes(name));
  for (const c of one ? [one] : COMMANDS) (await c.load())(program);
  for (const c of program.commands) c.exitOverride().showHelpAfterError(`usage: kctl ${c.name()} ${c.usage()}`);
  return program;
}

/** Runs the command `argv` names. */
export async function runProgram(argv: string[]): Promise<void> {
  const k = argv.indexOf('kubectl');
  if (k >= 0) {
    const { setKubectlArgs, splitKubectlArgs } = await import('./kubeconfig.ts');
    const split = splitKubectlArgs(argv.slice(k + 1));
    setKubectlArgs(split.kubectl);
    argv = [...argv.slice(0, k), ...split.kctl, 'kubectl'];
  }
  try {
    await (await buildProgram(argv)).parseAsync(argv, { from: 'user' });
  } catch (err) {
    if (err instanceof CommanderError) process.exit(err.exitCode);
    reportAndExit(err, argv.includes('--debug'));
  }
}
