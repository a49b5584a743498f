import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { loadConfig } from '../controller/config/config.ts';
import {
  checkControllerTokenExpiry,
  CONTROLLER_TOKEN_DEFAULT_EXPIRY,
  CONTROLLER_TOKEN_DEFAULT_USES,
} from '../controller/join/controller-tokens.ts';
import { createToken, invalidateToken, listTokens, parseExpiry, parseUses } from '../controller/join/tokens.ts';
import { credentialsFromKubeconfig, KubeClient } from '../kube/client.ts';
import { UserError } from '../base/errors.ts';
import { globals } from './support/globals.ts';
import { NODE_NAME } from '../controller/join/worker-tokens.ts';
import { outputOption, printJson, type OutputFormat } from './support/output.ts';

function adminClient(dataDir: string): KubeClient {
  const conf = join(dataDir, 'pki', 'admin.conf');
  if (!existsSync(conf))
    throw new UserError(`no admin kubeconfig at ${conf}; run this on a controller host (or pass its --data-dir)`);
  return new KubeClient(credentialsFromKubeconfig(conf));
}

export function tokenCommand(program: Command): void {
  const token = program.command('token').description('join tokens for workers and controllers');
  token
    .command('create')
    .description(
      'print a new join token (worker: for `kctl worker --token-file`; controller: for `kctl controller --token-file`)',
    )
    .requiredOption('--role <role>', 'what the token joins as: worker or controller')
    .option(
      '--expiry <duration>',
      `lifetime, e.g. 30m, 24h, 7d; worker: default 24h, 0 = never; controller: default ${CONTROLLER_TOKEN_DEFAULT_EXPIRY}, at most 7d`,
    )
    .option(
      '--uses <n>',
      `joins the token allows, then it is deleted (controller: default ${CONTROLLER_TOKEN_DEFAULT_USES}; worker: default unlimited)`,
    )
    .option(
      '--node-name <name>',
      'worker: the only node name the token may join as; it may be registered already (re-joining a reset host)',
    )
    .action(async (opts: { role: string; expiry?: string; uses?: string; nodeName?: string }, cmd: Command) => {
      if (opts.role !== 'worker' && opts.role !== 'controller')
        throw new UserError(`--role "${opts.role}" is not a role; use --role worker or --role controller`);
      const expiry = opts.expiry ?? (opts.role === 'controller' ? CONTROLLER_TOKEN_DEFAULT_EXPIRY : '24h');
      const expiryMs = parseExpiry(expiry);
      if (opts.role === 'controller') checkControllerTokenExpiry(expiryMs, expiry);
      const uses = opts.uses === undefined ? undefined : parseUses(opts.uses);
      if (opts.nodeName !== undefined && opts.role !== 'worker')
        throw new UserError('--node-name binds a worker token to a node; leave it out for --role controller');
      if (opts.nodeName !== undefined && !NODE_NAME.test(opts.nodeName))
        throw new UserError(
          `--node-name "${opts.nodeName}" is not a node name; use lower-case letters, digits, '-' and '.' (as kubectl get nodes shows them)`,
        );
      const g = globals(cmd);
      const cfgFile = join(g.dataDir, 'cluster-config.yaml');
      if (!existsSync(cfgFile))
        throw new UserError(`no controller config at ${cfgFile}; start kctl controller with this --data-dir first`);
      const cfg = await loadConfig(cfgFile);
      if (cfg.spec.profile === 'api-only')
        throw new UserError(
          opts.role === 'worker'
            ? 'this is an api-only control plane (spec.profile: api-only): it runs no konnectivity server and no node controllers, so workers cannot join; run a controller without --api-only for nodes'
            : 'this is an api-only control plane (spec.profile: api-only): it serves no join endpoint, so no other controller can join it',
        );
      process.stdout.write(
        (await createToken(adminClient(g.dataDir), cfg, {
          caPem: await readFile(join(g.dataDir, 'pki', 'ca.crt'), 'utf8'),
          role: opts.role,
          expiryMs,
          uses,
          nodeName: opts.nodeName,
        })) + '\n',
      );
    });
  token
    .command('list')
    .description('list join tokens: id, role, expiry and joins left (never the secret)')
    .addOption(outputOption())
    .action(async (opts: { output: OutputFormat }, cmd: Command) => {
      const tokens = await listTokens(adminClient(globals(cmd).dataDir));
      if (opts.output === 'json') {
        printJson(tokens);
        return;
      }
      const rows = [
        ['ID', 'ROLE', 'EXPIRES', 'USES LEFT', 'NODE NAME', 'JOINED'],
        ...tokens.map((t) => [
          t.id,
          t.role,
          t.expires ?? 'never',
          t.usesLeft === null ? '-' : String(t.usesLeft),
          t.nodeName ?? '-',
          t.joined?.length ? t.joined.join(',') : '-',
        ]),
      ];
      const w = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
      process.stdout.write(
        rows.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(w[i]!))).join('  ')).join('\n') +
          '\n',
      );
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
