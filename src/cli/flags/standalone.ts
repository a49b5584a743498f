// What the drop-in commands (kctl konnectivity-agent and konnectivity-server, also invoked as
// upstream's proxy-agent and proxy-server) share: they take upstream's Go command line, which
// commander must not see, read the files their flags name, and parse Go durations.
import type { Command } from 'commander';
import { readFileSync } from 'node:fs';
import { parseDuration } from '../../base/duration.ts';
import { reportAndExit } from '../support/errors.ts';
import { errnoOf, messageOf, UserError } from '../../base/errors.ts';

/** A Go duration flag in milliseconds; a one-line error naming the flag otherwise. */
export function parseGoDuration(flag: string, text: string): number {
  const ms = parseDuration(text);
  if (ms === null) throw new UserError(`${flag} "${text}" is not a duration; use e.g. 500ms, 1s, 5m`);
  return ms;
}

export function readFlagFile(cmd: string, flag: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new UserError(`${cmd}: --${flag} ${path}: cannot read (${errnoOf(err) ?? messageOf(err)})`);
  }
}

/** Lists the command in kctl --help; main() hands its arguments to `run` unparsed. */
export function standaloneCommand(
  program: Command,
  name: string,
  description: string,
  run: (argv: string[], cmd: string) => Promise<void>,
): void {
  program
    .command(name)
    .description(description)
    .helpOption(false)
    .allowUnknownOption()
    .allowExcessArguments()
    .action(async (_opts: unknown, command: Command) => {
      try {
        await run(command.args, name);
      } catch (err) {
        reportAndExit(err, command.args.includes('--debug'));
      }
    });
}
