// Where a tenant control plane (`kctl controller --name NAME`) keeps its files: paths only, so
// that every command can resolve --name without loading the tenant machinery (tenants.ts).
import { join } from 'node:path';
import { UserError } from '../../base/errors.ts';

export const TENANT_NAME = /^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$/;

export interface TenantLayout {
  name: string;
  /** <data-dir>/tenants: every tenant's record lives below it. */
  tenantsDir: string;
  dataDir: string;
  runDir: string;
  /** The host's staged versions of the components, shared by its tenants. */
  binRoot: string;
}

export function checkTenantName(name: string): void {
  if (!TENANT_NAME.test(name))
    throw new UserError(
      `--name "${name}" is not a tenant name: use 1 to 32 lower-case letters, digits and '-', starting and ending with a letter or digit`,
    );
}

export function tenantLayout(rootDataDir: string, rootRunDir: string, name: string): TenantLayout {
  checkTenantName(name);
  const tenantsDir = join(rootDataDir, 'tenants');
  return {
    name,
    tenantsDir,
    dataDir: join(tenantsDir, name),
    runDir: join(rootRunDir, 'tenants', name),
    binRoot: join(rootDataDir, 'bin'),
  };
}
