// Command lines for upstream components: kctl's defaults as a flag map, then the user's
// extraArgs from the config (which win), rendered as `--flag=value`.

export type FlagValue = string | number | boolean;

export function componentFlags(defaults: Record<string, FlagValue>, extra: Record<string, string> = {}): string[] {
  const merged: Record<string, string> = {};
  for (const [k, v] of Object.entries(defaults)) merged[k] = String(v);
  for (const [k, v] of Object.entries(extra)) merged[k.replace(/^--/, '')] = v;
  return Object.entries(merged).map(([k, v]) => `--${k}=${v}`);
}
