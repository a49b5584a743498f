import type { Command } from 'commander';
import { createLogger, type Logger } from '../base/log.ts';

export interface GlobalOptions {
  dataDir: string;
  runDir: string;
  debug: boolean;
}

export const DEFAULT_DATA_DIR = '/var/lib/kctl';
export const DEFAULT_RUN_DIR = '/run/kctl';

export function globals(cmd: Command): GlobalOptions {
  const o = cmd.optsWithGlobals<{ dataDir?: string; runDir?: string; debug?: boolean }>();
  return { dataDir: o.dataDir ?? DEFAULT_DATA_DIR, runDir: o.runDir ?? DEFAULT_RUN_DIR, debug: o.debug === true };
}

export function loggerFor(cmd: Command): Logger {
  return createLogger({ debug: globals(cmd).debug });
}
