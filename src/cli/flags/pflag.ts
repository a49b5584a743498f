// Command lines parsed the way Go's pflag parses them, for the commands that stand in for Go
// programs (kctl konnectivity-agent for upstream's proxy-agent): manifests written for those
// programs pass `--flag=value`, `--flag value`, bare booleans, `--flag=false`, `-v=4` and lists
// as comma-separated values, and each must mean here what it means there.
import { messageOf, UserError } from '../../base/errors.ts';

export type FlagKind =
  | 'string'
  | 'int'
  | 'uint'
  | 'float32'
  | 'bool'
  | 'duration'
  | 'strings'
  | 'level'
  | 'severity'
  | 'traceLocation'
  | 'moduleSpec';

export interface FlagSpec {
  name: string;
  short?: string;
  kind: FlagKind;
  /** The default as upstream's --help prints it; '' for none. */
  default: string;
  help: string;
  /**
   * Accepted so that upstream's command lines work, but kctl does nothing with it (klog's file
   * logging, for one): a value other than the default earns one warning at start.
   */
  inert?: string;
  /** Shown as upstream shows it, e.g. the generated uuid default of --agent-id. */
  shownDefault?: string;
  /** Accepted but left out of --help, as upstream hides its deprecated flags. */
  hidden?: boolean;
}

export type FlagValue = string | boolean | string[];

export interface ParsedFlags {
  /** Every flag's value: the default unless set. */
  values: Map<string, FlagValue>;
  /** Flags given on the command line (after normalisation of the name). */
  set: Set<string>;
  /** Non-flag arguments. */
  args: string[];
  help: boolean;
}

const TRUE = new Set(['1', 't', 'T', 'TRUE', 'true', 'True']);
const FALSE = new Set(['0', 'f', 'F', 'FALSE', 'false', 'False']);

/** Go's strconv.ParseBool. */
export function parseGoBool(text: string): boolean | null {
  if (TRUE.has(text)) return true;
  if (FALSE.has(text)) return false;
  return null;
}

function initial(spec: FlagSpec): FlagValue {
  if (spec.kind === 'bool') return spec.default === 'true';
  if (spec.kind === 'strings') return spec.default ? spec.default.split(',') : [];
  return spec.default;
}

/** A comma-separated list as pflag's StringSlice reads it (CSV: quotes may hold commas). */
export function splitCsv(text: string): string[] {
  if (text === '') return [];
  const out: string[] = [];
  let cur = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      if (quoted && text[i + 1] === '"') {
        cur += '"';
        i++;
      } else quoted = !quoted;
    } else if (c === ',' && !quoted) {
      out.push(cur);
      cur = '';
    } else cur += c;
  }
  if (quoted) throw new Error(`unterminated quote in "${text}"`);
  out.push(cur);
  return out;
}

function checkValue(command: string, spec: FlagSpec, text: string): void {
  const bad = (why: string) => new UserError(`${command}: invalid value "${text}" for --${spec.name}: ${why}`);
  if ((spec.kind === 'int' || spec.kind === 'level') && !/^[+-]?\d+$/.test(text)) throw bad('expected an integer');
  if (spec.kind === 'float32' && (text.trim() === '' || !Number.isFinite(Number(text)))) throw bad('expected a number');
  if (
    (spec.kind === 'uint' || spec.kind === 'severity') &&
    !/^\+?\d+$/.test(text) &&
    !(spec.kind === 'severity' && /^(INFO|WARNING|ERROR|FATAL)$/i.test(text))
  )
    throw bad(
      spec.kind === 'severity'
        ? 'expected a severity (INFO, WARNING, ERROR, FATAL) or its number'
        : 'expected a non-negative integer',
    );
  if (spec.kind === 'duration' && !/^[+-]?((\d+(\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h))+$|^0$/.test(text))
    throw bad('expected a Go duration such as 500ms, 1s, 5m, 1h0m0s');
}

/**
 * Parses `argv` against `specs` as pflag does. Unknown flags, a missing value and a value of the
 * wrong kind are one-line UserErrors naming the flag; `-h`/`--help` is reported, not acted on.
 */
export function parsePflags(command: string, specs: readonly FlagSpec[], argv: readonly string[]): ParsedFlags {
  const byName = new Map(specs.map((s) => [s.name, s]));
  const byShort = new Map(specs.filter((s) => s.short).map((s) => [s.short as string, s]));
  const values = new Map<string, FlagValue>(specs.map((s) => [s.name, initial(s)]));
  const set = new Set<string>();
  const args: string[] = [];
  let help = false;
  const unknown = (flag: string) =>
    new UserError(`${command}: unknown flag ${flag}; see ${command} --help for the flags it takes`);

  const assign = (spec: FlagSpec, text: string): void => {
    if (spec.kind === 'bool') {
      const b = parseGoBool(text);
      if (b === null)
        throw new UserError(`${command}: invalid value "${text}" for --${spec.name}: expected true or false`);
      values.set(spec.name, b);
    } else if (spec.kind === 'strings') {
      let items: string[];
      try {
        items = splitCsv(text);
      } catch (err) {
        throw new UserError(`${command}: invalid value for --${spec.name}: ${messageOf(err)}`);
      }
      // pflag: the first use replaces the default, later uses append.
      values.set(spec.name, set.has(spec.name) ? [...(values.get(spec.name) as string[]), ...items] : items);
    } else {
      checkValue(command, spec, text);
      values.set(spec.name, text);
    }
    set.add(spec.name);
  };

  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    if (a === '--') {
      args.push(...argv.slice(i + 1));
      break;
    }
    if (a.startsWith('--')) {
      const eq = a.indexOf('=');
      // klog's flags were once spelled with underscores (log_dir); pflag users normalise them.
      const name = (eq < 0 ? a.slice(2) : a.slice(2, eq)).replaceAll('_', '-');
      if (name === 'help') {
        help = true;
        continue;
      }
      const spec = byName.get(name);
      if (!spec) throw unknown(`--${name}`);
      if (eq >= 0) assign(spec, a.slice(eq + 1));
      else if (spec.kind === 'bool') assign(spec, 'true');
      else if (i + 1 < argv.length) assign(spec, argv[++i] as string);
      else throw new UserError(`${command}: flag --${name} needs a value`);
      continue;
    }
    if (a.startsWith('-') && a.length > 1) {
      // Shorthands: -v 4, -v=4, -v4; -h.
      const letter = a[1] as string;
      if (letter === 'h' && a.length === 2) {
        help = true;
        continue;
      }
      const spec = byShort.get(letter);
      if (!spec) throw unknown(a.split('=')[0] as string);
      const rest = a.slice(2);
      if (rest.startsWith('=')) assign(spec, rest.slice(1));
      else if (rest) assign(spec, rest);
      else if (spec.kind === 'bool') assign(spec, 'true');
      else if (i + 1 < argv.length) assign(spec, argv[++i] as string);
      else throw new UserError(`${command}: flag -${letter} needs a value`);
      continue;
    }
    args.push(a);
  }
  return { values, set, args, help };
}

/** Flags set to something other than their default that kctl accepts but does not act on. */
export function inertFlagsSet(specs: readonly FlagSpec[], parsed: ParsedFlags): string[] {
  return specs
    .filter((s) => s.inert && parsed.set.has(s.name) && String(parsed.values.get(s.name)) !== String(initial(s)))
    .map((s) => `--${s.name} (${s.inert})`);
}

const TYPE_NAMES: Partial<Record<FlagKind, string>> = {
  string: 'string',
  int: 'int',
  uint: 'uint',
  float32: 'float32',
  duration: 'duration',
  strings: 'strings',
  level: 'Level',
  severity: 'severity',
  traceLocation: 'traceLocation',
  moduleSpec: 'moduleSpec',
};

/** --help in pflag's layout: the same flags, types and defaults a user of the Go program knows. */
export function renderPflagHelp(usage: string, description: string, specs: readonly FlagSpec[]): string {
  const rows = [
    ...specs.filter((s) => !s.hidden),
    { name: 'help', short: 'h', kind: 'bool' as const, default: '', help: 'help for this command' },
  ]
    .sort((a, b) => a.name.localeCompare(b.name))
    .map((s) => {
      const left = `${s.short ? `-${s.short}, ` : '    '}--${s.name}${TYPE_NAMES[s.kind] ? ` ${TYPE_NAMES[s.kind]}` : ''}`;
      const shown = 'shownDefault' in s && s.shownDefault !== undefined ? s.shownDefault : s.default;
      const def =
        shown === '' || (s.kind === 'bool' && shown === 'false')
          ? ''
          : ` (default ${s.kind === 'string' ? `"${shown}"` : shown})`;
      const inert = 'inert' in s && s.inert ? ` [kctl: accepted, no effect: ${s.inert}]` : '';
      return [left, `${s.help}${def}${inert}`] as const;
    });
  const width = Math.max(...rows.map(([l]) => l.length)) + 3;
  return `${description}\n\nUsage:\n  ${usage} [flags]\n\nFlags:\n${rows.map(([l, r]) => `  ${l.padEnd(width)}${r}`).join('\n')}\n`;
}
