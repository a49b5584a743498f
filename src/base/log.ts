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
  const base = {};
  const usePretty = opts.pretty ?? (opts.destination === undefined && process.stdout.isTTY === true);
  if (usePretty) {
    // Synchronous in-process prettifier: a worker-thread transport does not survive bundling.
    const stream = pretty({
      colorize: true,
      sync: true,
      ignore: 'pid,hostname',
      messageFormat: '[{component}] {msg}',
      destination: opts.destination ?? 1,
    });
    return withComponent(pino({ level, base }, stream), 'kctl');
  }
  return withComponent(
    pino(
      { level, base, timestamp: pino.stdTimeFunctions.isoTime },
      (opts.destination ?? pino.destination({ sync: true })) as pino.DestinationStream,
    ),
    'kctl',
  );
}

// pino serialises every binding of every ancestor, so a child of a `component: kctl` logger
// would print `component` twice. Component loggers therefore branch off the unbound root.
const rootOf = new WeakMap<Logger, Logger>();

function withComponent(root: Logger, component: string): Logger {
  const child = root.child({ component });
  rootOf.set(child, root);
  return child;
}

export function componentLogger(parent: Logger, component: string): Logger {
  const root = rootOf.get(parent);
  return root ? withComponent(root, component) : parent.child({ component });
}
