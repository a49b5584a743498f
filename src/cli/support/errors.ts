// How the CLI ends on an error: one line on stderr, the stack only with --debug, and the exit
// code a UserError carries (1 for anything else).
import { UserError } from '../../base/errors.ts';

export function reportAndExit(err: unknown, debug: boolean): never {
  const msg = err instanceof Error ? err.message : String(err);
  process.stderr.write(`kctl: ${msg.split('\n')[0]}\n`);
  if (debug && err instanceof Error && err.stack) process.stderr.write(`${err.stack}\n`);
  process.exit(err instanceof UserError ? err.exitCode : 1);
}
