import { Option } from 'commander';

export type OutputFormat = 'text' | 'json';

/** `-o json` on every status-like command. */
export function outputOption(): Option {
  return new Option('-o, --output <format>', 'output format').choices(['text', 'json']).default('text');
}

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + '\n');
}

/** Rows under a header, each column as wide as its widest cell (kubectl's plain table). */
export function renderTable(head: string[], rows: string[][]): string[] {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [line(head), ...rows.map(line)];
}
