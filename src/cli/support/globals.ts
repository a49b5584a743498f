import type { Command } from 'commander';
import { join } from 'node:path';
import { createLogger, type Logger } from '../../base/log.ts';
import { tenantLayout, type TenantLayout } from '../../controller/tenants/tenant-layout.ts';

export interface GlobalOptions {
  /** The data and run dirs this command works on: the tenant's with --name. */
  dataDir: string;
  runDir: string;
  debug: boolean;
  /** --name: a tenant control plane under <data-dir>/tenants/NAME and <run-dir>/tenants/NAME. */
  tenant?: TenantLayout;
  /** The staged versions of the components: <data-dir>/bin, which tenants share. */
  binRoot: string;
  /** --data-dir and --run-dir as given (the host's, where tenants/ lives). */
  rootDataDir: string;
  rootRunDir: string;
}

export const DEFAULT_DATA_DIR = '/var/lib/kctl';
export const DEFAULT_RUN_DIR = '/run/kctl';

export function globals(cmd: Command): GlobalOptions {
  const o = cmd.optsWithGlobals<{
    dataDir?: string;
    runDir?: string;
    debug?: boolean;
    name?: string;
  }>();
  const rootDataDir = o.dataDir ?? DEFAULT_DATA_DIR;
  const rootRunDir = o.runDir ?? DEFAULT_RUN_DIR;
  const tenant = o.name === undefined ? undefined : tenantLayout(rootDataDir, rootRunDir, o.name);
  return {
    dataDir: tenant?.dataDir ?? rootDataDir,
    runDir: tenant?.runDir ?? rootRunDir,
    debug: o.debug === true,
    tenant,
    binRoot: tenant?.binRoot ?? join(rootDataDir, 'bin'),
    rootDataDir,
    rootRunDir,
  };
}

export function loggerFor(cmd: Command): Logger {
  return createLogger({ debug: globals(cmd).debug });
}
