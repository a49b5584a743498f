import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseDuration } from '../../base/duration.ts';
import { UserError } from '../../base/errors.ts';
import { loadConfig, type ClusterConfig } from '../../controller/config/config.ts';
import { pkiPaths, type PkiPaths } from '../../pki/index.ts';
import { globals } from './globals.ts';

/** The controller whose data dir the command names (--data-dir, --name): its config and PKI, or one line saying there is none. */
export async function localController(cmd: Command): Promise<{ cfg: ClusterConfig; pki: PkiPaths }> {
  const g = globals(cmd);
  const cfgFile = join(g.dataDir, 'cluster-config.yaml');
  const pki = pkiPaths(join(g.dataDir, 'pki'));
  if (!existsSync(cfgFile) || !existsSync(pki.adminConf))
    throw new UserError(
      `no controller at ${g.dataDir}; run this on a controller host (or pass its --data-dir / --name)`,
    );
  return { cfg: await loadConfig(cfgFile), pki };
}

/** A --timeout value in milliseconds; `example` goes into the error for a value that is not a positive duration. */
export function timeoutMs(value: string, example: string): number {
  const ms = parseDuration(value);
  if (ms === null || ms <= 0) throw new UserError(`--timeout "${value}" is not a duration; use e.g. ${example} or 90s`);
  return ms;
}

/** Progress of a long command: to stderr, so -o json leaves stdout to the result. */
export const progressToStderr = (line: string): void => void process.stderr.write(`${line}\n`);
