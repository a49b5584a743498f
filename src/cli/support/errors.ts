// How the CLI ends on an error: one line on stderr, the stack only with --debug, and the exit
// code a UserError carries (1 for anything else).
import { reasonOf, UserError } from '../../base/errors.ts';

export function reportAndExit(err: unknown, debug: boolean): never {
  process.stderr.write(`kctl: ${reasonOf(err)}\n`);
  if (debug && err instanceof Error && err.stack) process.stderr.write(`${err.stack}\n`);
  process.exit(err instanceof UserError ? err.exitCode : 1);
}
