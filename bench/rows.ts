// One result row of the bench, and how a run reports its rows: a Markdown table with notes on
// stderr, and with --json the rows on stdout (a full run also records them: record.ts).

export type Column = 'kctl' | 'upstream' | 'direct';

export interface Row {
  scenario: string;
  unit: string;
  kctl: number | null;
  upstream: number | null;
  direct: number | null;
  /** Lowest and highest of the repetitions a figure is the median of, where the row gives them. */
  range?: Partial<Record<Column, [number, number]>>;
  /** Why a figure is null, when it is. */
  note?: string;
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

const fmt = (x: number | null): string => (x === null ? '-' : x >= 100 ? x.toFixed(0) : x.toFixed(x >= 10 ? 1 : 3));

function cell(r: Row, c: Column): string {
  const range = r.range?.[c];
  return range ? `${fmt(r[c])} (${fmt(range[0])}-${fmt(range[1])})` : fmt(r[c]);
}

/** The rows as a Markdown table, kctl's ratios to upstream and direct, and any extra columns given (one cell per row). */
export function markdownTable(out: Row[], extra: Record<string, string[]> = {}): string {
  const ratio = (a: number | null, b: number | null): string =>
    a === null || b === null || b === 0 ? '-' : `${(a / b).toFixed(2)}x`;
  const more = Object.keys(extra);
  return [
    `| scenario | unit | kctl | upstream | direct | kctl/upstream | kctl/direct |${more.map((k) => ` ${k} |`).join('')}`,
    `|---|---|---:|---:|---:|---:|---:|${more.map(() => '---|').join('')}`,
    ...out.map(
      (r, i) =>
        `| ${r.scenario} | ${r.unit} | ${cell(r, 'kctl')} | ${cell(r, 'upstream')} | ${cell(r, 'direct')} | ${ratio(r.kctl, r.upstream)} | ${ratio(r.kctl, r.direct)} |${more.map((k) => ` ${extra[k]![i] ?? ''} |`).join('')}`,
    ),
  ].join('\n');
}

/** The rows' notes as Markdown list items (a note on a row with no figure says why it has none: the table shows that). */
export function notesOf(out: Row[]): string[] {
  return out.filter((r) => r.note && r.kctl !== null).map((r) => `- ${r.scenario}: ${r.note}`);
}

export function reportRows(out: Row[], json: boolean): void {
  const notes = notesOf(out);
  process.stderr.write(`${markdownTable(out)}\n${notes.length ? `\n${notes.join('\n')}\n` : ''}`);
  if (json) process.stdout.write(`${JSON.stringify({ runs: out })}\n`);
}
