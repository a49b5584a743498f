// Structured logs: JSON lines when stdout is not a terminal, readable lines when it is.
// Every line carries a `component` field; children set their own.
import { pino, type Logger } from 'pino';
import pretty from 'pino-pretty';

export type { Logger };

export interface LogOptions {
  debug?: boolean;
  /** Where lines go; defaults to stdout. Tests pass a stream to read them back. */
  destination?: NodeJS.WritableStream;
  pretty?: boolean;
}

export function createLogger(opts: LogOptions = {}): Logger {
  const level = opts.debug ? 'debug' : (process.env.KCTL_LOG_LEVEL ?? 'info');
  const base = { component: 'kctl' };
  const usePretty = opts.pretty ?? (opts.destination === undefined && process.stdout.isTTY === true);
  if (usePretty) {
    // Synchronous in-process prettifier: a worker-thread transport does not survive bundling.
    const stream = pretty({ colorize: true, sync: true, ignore: 'pid,hostname', messageFormat: '[{component}] {msg}', destination: opts.destination ?? 1 });
    return pino({ level, base }, stream);
  }
  return pino({ level, base, timestamp: pino.stdTimeFunctions.isoTime }, (opts.destination ?? pino.destination({ sync: true })) as pino.DestinationStream);
}

export function componentLogger(parent: Logger, component: string): Logger {
  return parent.child({ component });
}
