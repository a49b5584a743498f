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
