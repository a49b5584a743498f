// A child's stdout/stderr, turned into log records: split into lines across chunk boundaries,
// bounded in length, and mapped to a level when the line says one (klog, zap JSON, logrus).
// Hand-written: execa's line mode buffers a whole line however long it grows; ours caps it.
import { StringDecoder } from 'node:string_decoder';

export const DEFAULT_MAX_LINE_LENGTH = 16 * 1024;

export type ChildLogLevel = 'debug' | 'info' | 'warn' | 'error' | 'fatal';

export interface ChildLine {
  level: ChildLogLevel;
  msg: string;
  /** Extra fields of a JSON line (etcd, kube-* with --logging-format=json). */
  fields?: Record<string, unknown>;
}

/** Feeds chunks in, calls `onLine` for every complete line; `end()` flushes the last partial line. */
export class LineSplitter {
  private readonly decoder = new StringDecoder('utf8');
  private partial = '';
  /** True while skipping the rest of a line already emitted as truncated. */
  private discarding = false;

  constructor(
    private readonly onLine: (line: string, truncated: boolean) => void,
    private readonly maxLength = DEFAULT_MAX_LINE_LENGTH,
  ) {}

  push(chunk: Buffer | string): void {
    let text = typeof chunk === 'string' ? chunk : this.decoder.write(chunk);
    for (;;) {
      const nl = text.indexOf('\n');
      if (nl === -1) break;
      const piece = text.slice(0, nl);
      text = text.slice(nl + 1);
      if (this.discarding) {
        this.discarding = false;
        this.partial = '';
        continue;
      }
      this.emit(this.partial + piece, false);
      this.partial = '';
    }
    if (this.discarding) return;
    this.partial += text;
    if (this.partial.length > this.maxLength) {
      this.emit(this.partial.slice(0, this.maxLength), true);
      this.partial = '';
      this.discarding = true;
    }
  }

  end(): void {
    const rest = this.partial + this.decoder.end();
    this.partial = '';
    if (!this.discarding && rest.length > 0) this.emit(rest.slice(0, this.maxLength), rest.length > this.maxLength);
    this.discarding = false;
  }

  private emit(line: string, truncated: boolean): void {
    const trimmed = line.endsWith('\r') ? line.slice(0, -1) : line;
    if (trimmed.length > this.maxLength) this.onLine(trimmed.slice(0, this.maxLength), true);
    else if (trimmed.trim().length > 0) this.onLine(trimmed, truncated);
  }
}

// klog header: Lmmdd hh:mm:ss.uuuuuu threadid file:line] msg
const KLOG = /^([IWEF])\d{4}\s+\d{2}:\d{2}:\d{2}/;
const KLOG_LEVELS: Record<string, ChildLogLevel> = { I: 'info', W: 'warn', E: 'error', F: 'fatal' };
// logrus text format (containerd, kine): time="..." level=warning msg="..."
const LOGRUS = /^time="[^"]*" level=(\w+)/;

function namedLevel(name: string): ChildLogLevel | undefined {
  switch (name.toLowerCase()) {
    case 'trace':
    case 'debug':
      return 'debug';
    case 'info':
      return 'info';
    case 'warn':
    case 'warning':
      return 'warn';
    case 'error':
    case 'dpanic':
      return 'error';
    case 'panic':
    case 'fatal':
      return 'fatal';
    default:
      return undefined;
  }
}

/** What a line of child output means for the log: its level, message and (for JSON) fields. */
export function parseChildLine(line: string): ChildLine {
  const klog = KLOG.exec(line);
  if (klog) return { level: KLOG_LEVELS[klog[1] ?? ''] ?? 'info', msg: line };
  if (line.startsWith('{')) {
    const json = parseJsonObject(line);
    if (json) return fromJson(json, line);
  }
  const logrus = LOGRUS.exec(line);
  if (logrus) return { level: namedLevel(logrus[1] ?? '') ?? 'info', msg: line };
  return { level: 'info', msg: line };
}

function parseJsonObject(line: string): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(line);
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

function fromJson(json: Record<string, unknown>, line: string): ChildLine {
  // ts/time: the child's own timestamp; the record carries ours.
  const { level, msg, message, ts: _ts, time: _time, ...rest } = json;
  let lvl = typeof level === 'string' ? namedLevel(level) : undefined;
  // zap/logr JSON from kube-* components: no level, verbosity `v`, errors carry `err`.
  if (lvl === undefined)
    lvl = typeof rest.err === 'string' ? 'error' : typeof rest.v === 'number' && rest.v > 0 ? 'debug' : 'info';
  const text = typeof msg === 'string' ? msg : typeof message === 'string' ? message : line;
  return Object.keys(rest).length > 0 ? { level: lvl, msg: text, fields: rest } : { level: lvl, msg: text };
}

/** Each secret as written and as a JSON line of a Go program holds it (`"` and `\` escaped, `<>&` as \u003c...), longest first. */
export function secretForms(secrets: string[]): string[] {
  const go = (s: string) =>
    JSON.stringify(s)
      .slice(1, -1)
      .replace(/[<>&]/g, (c) => `\\u00${c.charCodeAt(0).toString(16)}`);
  const forms = new Set(secrets.filter((s) => s !== '').flatMap((s) => [s, go(s)]));
  return [...forms].sort((a, b) => b.length - a.length);
}
