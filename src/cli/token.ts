import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig } from '../controller/config.ts';
import { createToken, invalidateToken, listTokens, parseExpiry } from '../controller/tokens.ts';
import { credentialsFromKubeconfig, KubeClient } from '../kube/client.ts';
import { UserError } from '../base/errors.ts';
import { globals } from './globals.ts';
import { outputOption, printJson, type OutputFormat } from './output.ts';

function adminClient(dataDir: string): KubeClient {
  const conf = join(dataDir, 'pki', 'admin.conf');
  if (!existsSync(conf)) throw new UserError(`no admin kubeconfig at ${conf}; run this on a controller host (or pass its --data-dir)`);
  return new KubeClient(credentialsFromKubeconfig(conf));
}

export function tokenCommand(program: Command): void {
  const token = program.command('token').description('join tokens for workers and controllers');
  token
    .command('create')
    .description('print a new join token (worker: for `kctl worker --token`; controller: for `kctl controller --token-file`)')
    .requiredOption('--role <role>', 'what the token joins as: worker or controller')
    .option('--expiry <duration>', 'lifetime, e.g. 30m, 24h, 7d; 0 = never', '24h')
    .action(async (opts: { role: string; expiry: string }, cmd: Command) => {
      if (opts.role !== 'worker' && opts.role !== 'controller')
        throw new UserError(`--role "${opts.role}" is not a role; use --role worker or --role controller`);
      const expiryMs = parseExpiry(opts.expiry);
      const g = globals(cmd);
      const cfgFile = join(g.dataDir, 'cluster-config.yaml');
      if (!existsSync(cfgFile)) throw new UserError(`no controller config at ${cfgFile}; start kctl controller with this --data-dir first`);
      const cfg = await loadConfig(cfgFile);
      if (cfg.spec.profile === 'api-only')
        throw new UserError(
          opts.role === 'worker'
            ? 'this is an api-only control plane (spec.profile: api-only): it runs no konnectivity server and no node controllers, so workers cannot join; run a controller without --api-only for nodes'
            : 'this is an api-only control plane (spec.profile: api-only): it serves no join endpoint, so no other controller can join it',
        );
      process.stdout.write((await createToken(adminClient(g.dataDir), cfg, join(g.dataDir, 'pki', 'ca.crt'), opts.role, expiryMs)) + '\n');
    });
  token
    .command('list')
    .description('list join tokens: id, role and expiry (never the secret)')
    .addOption(outputOption())
    .action(async (opts: { output: OutputFormat }, cmd: Command) => {
      const tokens = await listTokens(adminClient(globals(cmd).dataDir));
      if (opts.output === 'json') {
        printJson(tokens);
        return;
      }
      const rows = [['ID', 'ROLE', 'EXPIRES'], ...tokens.map((t) => [t.id, t.role, t.expires ?? 'never'])];
      const w = [0, 1].map((i) => Math.max(...rows.map((r) => r[i]!.length)));
      process.stdout.write(rows.map((r) => `${r[0]!.padEnd(w[0]!)}  ${r[1]!.padEnd(w[1]!)}  ${r[2]}`).join('\n') + '\n');
    });
  token
    .command('invalidate')
    .description('delete a join token so it can no longer be used')
    .argument('<id>', 'token id, as shown by kctl token list')
    .action(async (id: string, _opts: unknown, cmd: Command) => {
      await invalidateToken(adminClient(globals(cmd).dataDir), id);
      process.stdout.write(`token ${id} invalidated\n`);
    });
}
