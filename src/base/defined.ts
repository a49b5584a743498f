// Options over defaults: `{ ...DEFAULTS, ...definedOnly(options) }` keeps a default that an option
// given as undefined would otherwise erase.

/** `o` without its undefined fields (a field left undefined is as good as left out). */
export function definedOnly<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}
