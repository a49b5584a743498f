import { Option } from 'commander';

export type OutputFormat = 'text' | 'json';

/** `-o json` on every status-like command. */
export function outputOption(): Option {
  return new Option('-o, --output <format>', 'output format').choices(['text', 'json']).default('text');
}

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + '\n');
}
