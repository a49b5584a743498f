// A PKI problem the operator must fix by hand. The message is one line: which file, what is
// wrong, what to do. Never includes key material.
export class PkiError extends Error {
  override name = 'PkiError';
}
