// Errors a user can hit: one line saying what failed and what to do. The CLI prints the
// message alone (no stack unless --debug) and exits with `exitCode`.
export class UserError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

// Reading what was thrown. Anything can be thrown in JavaScript (a string, an object from a
// library), so these are the one way kctl reads an error it did not make itself.

/** The thrown value as an Error (a non-Error is wrapped, its text kept). */
export function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

/** The whole message of whatever was thrown. */
export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The first line of an error's message: what a one-line user-facing reason is made of. */
export function reasonOf(err: unknown): string {
  return (messageOf(err).split('\n')[0] ?? '').trim();
}

/** A system error's code (`ENOENT`, `EADDRINUSE`, ...), or undefined for anything else. */
export function errnoOf(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null || !('code' in err)) return undefined;
  return typeof err.code === 'string' ? err.code : undefined;
}
