// kctl: one binary, two roles. Each command lives in its own file beside this one.
// This file only dispatches, and loads what a command needs when it runs: the bundle is one
// script, and every module in the static import graph runs its top-level code at start. The
// drop-in agent and the staging child never load the commander tree (zod, node-forge, execa,
// the controller; about 20 MiB of an idle agent's RSS, bench/HISTORY.md).
import { basename } from 'node:path';
import { STAGE_COMMAND } from '../payload/stage-command.ts';
import { reportAndExit } from './support/errors.ts';

type DropIn = (argv: readonly string[], cmd: string) => Promise<void>;
/** `invokedAs`: the name kctl answers to as upstream's agent or server (a symlink or hard link to the executable). */
const DROP_INS: { name: string; invokedAs: string; load: () => Promise<DropIn> }[] = [
  {
    name: 'konnectivity-agent',
    invokedAs: 'proxy-agent',
    load: async () => (await import('./konnectivity-agent.ts')).runAgentCli,
  },
  {
    name: 'konnectivity-server',
    invokedAs: 'proxy-server',
    load: async () => (await import('./konnectivity-server.ts')).runServerCli,
  },
];

/** The drop-in agent and server take upstream's command line, which commander must not see. */
function dropInInvocation(argv: string[]): { args: string[]; cmd: string; load: () => Promise<DropIn> } | undefined {
  // The subcommand wins over the invocation name: the proxy-agent image runs the server as
  // `/proxy-agent konnectivity-server <flags>`.
  const named = DROP_INS.find((d) => argv[0] === d.name);
  if (named) return { args: argv.slice(1), cmd: named.name, load: named.load };
  const invoked = DROP_INS.find((d) => basename(process.argv0) === d.invokedAs);
  return invoked && { args: argv, cmd: invoked.invokedAs, load: invoked.load };
}

export async function main(argv: string[]): Promise<void> {
  // Private by default, whatever the caller's umask: keys, sockets, state and every child's files.
  // What others must read (staged binaries, the proxy-agent image) is given its mode explicitly.
  process.umask(0o077);
  if (argv[0] === STAGE_COMMAND) {
    // A staging child of kctl controller / worker (payload/stage-child.ts), not a user command.
    const { runStageChild } = await import('../payload/stage-child.ts');
    await runStageChild(argv[1] ?? '{}').catch((err: unknown) => reportAndExit(err, false));
    return;
  }
  const dropIn = dropInInvocation(argv);
  if (dropIn) {
    try {
      await (
        await dropIn.load()
      )(dropIn.args, dropIn.cmd);
    } catch (err) {
      reportAndExit(err, dropIn.args.includes('--debug'));
    }
    // Stopped by a signal: exit 0 even if a library left a timer behind.
    process.exit(0);
  }
  const { runProgram } = await import('./program.ts');
  await runProgram(argv);
}
