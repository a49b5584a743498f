// kctl: one binary, two roles. Each command lives in its own file beside this one.
import { Command, CommanderError } from 'commander';
import { KCTL_VERSION } from '../base/version.ts';
import { controllerCommand } from './controller.ts';
import { reportAndExit } from './errors.ts';
import { DEFAULT_DATA_DIR, DEFAULT_RUN_DIR } from './globals.ts';
import { configCommand, kubeconfigCommand, kubectlCommand, setKubectlArgs, splitKubectlArgs } from './kubeconfig.ts';
import { statusCommand } from './status.ts';
import { tokenCommand } from './token.ts';
import { airgapCommand } from './airgap.ts';
import { resetCommand } from './reset.ts';
import { serviceCommands } from './service.ts';
import { sysinfoCommand } from './sysinfo.ts';
import { backupCommands } from './backup.ts';
import { etcdCommands } from './etcd.ts';
import { workerCommand } from './worker.ts';
import { PROXY_AGENT_NAME, konnectivityAgentCommand, runAgentCli } from './konnectivity-agent.ts';
import { PROXY_SERVER_NAME, konnectivityServerCommand, runServerCli } from './konnectivity-server.ts';
import { basename } from 'node:path';
import { versionCommand } from './version.ts';
import { tenantCommands } from './tenant.ts';
import { STAGE_COMMAND, runStageChild } from '../payload/stage-child.ts';

export function buildProgram(): Command {
  const program = new Command('kctl')
    .description('kctl: a single-binary Kubernetes distribution for remote control planes')
    .version(KCTL_VERSION, '--version', 'print the kctl version')
    .option('--data-dir <dir>', 'where kctl keeps its state', DEFAULT_DATA_DIR)
    .option('--run-dir <dir>', 'pid files and sockets (status.sock)', DEFAULT_RUN_DIR)
    .option(
      '--name <tenant>',
      'a tenant control plane on this host (kctl controller --name): its dirs are <data-dir>/tenants/NAME and <run-dir>/tenants/NAME',
    )
    .option('--debug', 'debug logs and stack traces on errors')
    .showSuggestionAfterError()
    .exitOverride()
    .configureOutput({
      // commander's own errors: one line, then a pointer to usage.
      outputError: (str, write) => write(`kctl: ${str.replace(/^error: /, '').trim()}\n`),
    });
  program.showHelpAfterError(`usage: kctl ${program.usage()}  (kctl --help for more)`);
  versionCommand(program);
  controllerCommand(program);
  workerCommand(program);
  statusCommand(program);
  kubeconfigCommand(program);
  kubectlCommand(program);
  configCommand(program);
  tokenCommand(program);
  etcdCommands(program);
  tenantCommands(program);
  konnectivityAgentCommand(program);
  konnectivityServerCommand(program);
  airgapCommand(program);
  resetCommand(program);
  serviceCommands(program);
  sysinfoCommand(program);
  backupCommands(program);
  for (const c of program.commands) c.exitOverride().showHelpAfterError(`usage: kctl ${c.name()} ${c.usage()}`);
  return program;
}

type DropIn = (argv: readonly string[], cmd: string) => Promise<void>;
const DROP_INS: { name: string; invokedAs: string; run: DropIn }[] = [
  { name: 'konnectivity-agent', invokedAs: PROXY_AGENT_NAME, run: runAgentCli },
  { name: 'konnectivity-server', invokedAs: PROXY_SERVER_NAME, run: runServerCli },
];

/** The drop-in agent and server take upstream's command line, which commander must not see. */
function dropInInvocation(argv: string[]): { args: string[]; cmd: string; run: DropIn } | undefined {
  // The subcommand wins over the invocation name: the proxy-agent image runs the server as
  // `/proxy-agent konnectivity-server <flags>`.
  const named = DROP_INS.find((d) => argv[0] === d.name);
  if (named) return { args: argv.slice(1), cmd: named.name, run: named.run };
  const invoked = DROP_INS.find((d) => basename(process.argv0) === d.invokedAs);
  return invoked && { args: argv, cmd: invoked.invokedAs, run: invoked.run };
}

export async function main(argv: string[]): Promise<void> {
  if (argv[0] === STAGE_COMMAND) {
    // A staging child of kctl controller / worker (payload/stage-child.ts), not a user command.
    await runStageChild(argv[1] ?? '{}').catch((err: unknown) => reportAndExit(err, false));
    return;
  }
  const dropIn = dropInInvocation(argv);
  if (dropIn) {
    try {
      await dropIn.run(dropIn.args, dropIn.cmd);
    } catch (err) {
      reportAndExit(err, dropIn.args.includes('--debug'));
    }
    // Stopped by a signal: exit 0 even if a library left a timer behind.
    process.exit(0);
  }
  const program = buildProgram();
  const k = argv.indexOf('kubectl');
  if (k >= 0) {
    const split = splitKubectlArgs(argv.slice(k + 1));
    setKubectlArgs(split.kubectl);
    argv = [...argv.slice(0, k), ...split.kctl, 'kubectl'];
  }
  try {
    await program.parseAsync(argv, { from: 'user' });
  } catch (err) {
    if (err instanceof CommanderError) process.exit(err.exitCode);
    reportAndExit(err, argv.includes('--debug'));
  }
}
