import type { Command } from 'commander';
import { createLogger, type Logger } from '../log/logger.ts';

export interface GlobalOptions {
  dataDir: string;
  debug: boolean;
}

export const DEFAULT_DATA_DIR = '/var/lib/kctl';

export function globals(cmd: Command): GlobalOptions {
  const o = cmd.optsWithGlobals<{ dataDir?: string; debug?: boolean }>();
  return { dataDir: o.dataDir ?? DEFAULT_DATA_DIR, debug: o.debug === true };
}

export function loggerFor(cmd: Command): Logger {
  return createLogger({ debug: globals(cmd).debug });
}
