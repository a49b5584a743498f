// Errors a user can hit: one line, what failed and what to do. Stack traces only with --debug.
export class UserError extends Error {
  constructor(message: string, readonly exitCode = 1) {
    super(message);
  }
}

export function reportAndExit(err: unknown, debug: boolean): never {
  const msg = err instanceof Error ? err.message : String(err);
  process.stderr.write(`kctl: ${msg.split('\n')[0]}\n`);
  if (debug && err instanceof Error && err.stack) process.stderr.write(`${err.stack}\n`);
  process.exit(err instanceof UserError ? err.exitCode : 1);
}
