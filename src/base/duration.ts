// Durations as Go (and so every upstream flag) spells them: "500ms", "1m30s", "1.5h".
// Days ("7d") are kctl's own addition for token expiry and must be asked for.

const UNIT_MS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

export interface DurationOptions {
  /** Accept "d" (24 h) as a unit. Go does not. */
  days?: boolean;
}

/** Milliseconds, or null when `text` is not a duration. "0" is zero, as in Go. */
export function parseDuration(text: string, opts: DurationOptions = {}): number | null {
  if (text === '0') return 0;
  const re = /(\d+(?:\.\d+)?|\.\d+)(ns|us|\u00b5s|ms|s|m|h|d)/gy; // \u00b5: esbuild's charset=ascii leaves regex literals alone
  let total = 0;
  let consumed = 0;
  for (const m of text.matchAll(re)) {
    const unit = m[2] ?? '';
    if (unit === 'd' && !opts.days) return null;
    total += Number(m[1]) * (UNIT_MS[unit] ?? NaN);
    consumed += m[0].length;
  }
  if (!text || consumed !== text.length || !Number.isFinite(total)) return null;
  return total;
}
