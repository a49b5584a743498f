import type { Command } from 'commander';
import { execa } from 'execa';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { defaultConfigYaml, loadConfig } from '../controller/config/config.ts';
import { parseServiceAccount, serviceAccountKubeconfig, userKubeconfig } from '../controller/pki/kubeconfigs.ts';
import { parseExpiry } from '../controller/join/tokens.ts';
import { credentialsFromKubeconfig, KubeClient } from '../kube/client.ts';
import { pkiPaths } from '../pki/index.ts';
import { componentLogger, createLogger } from '../base/log.ts';
import { stageOwn } from '../payload/stage-child.ts';
import { CURRENT } from '../payload/versions.ts';
import { UserError } from '../base/errors.ts';
import { globals } from './support/globals.ts';

function adminConf(dataDir: string): string {
  return join(dataDir, 'pki', 'admin.conf');
}

export function kubeconfigCommand(program: Command): void {
  const kc = program.command('kubeconfig').description('print kubeconfigs for this cluster');
  kc.command('admin')
    .description('print the cluster-admin kubeconfig (keep it secret: it grants full access)')
    .action(async (_opts: unknown, cmd: Command) => {
      const file = adminConf(globals(cmd).dataDir);
      if (!existsSync(file))
        throw new UserError(
          `no admin kubeconfig at ${file}; run kctl controller (or --init-only) with this --data-dir first`,
        );
      process.stdout.write(await readFile(file, 'utf8'));
    });
  kc.command('create')
    .description(
      'print a kubeconfig for someone outside the control plane: an operator (service-account token) or a person (client certificate)',
    )
    .option(
      '--service-account <ns/name>',
      "a bound token of this service account (TokenRequest); it can do what the account's RBAC allows",
    )
    .option('--user <name>', 'a client certificate from the cluster CA with this user name (CN)')
    .option('--groups <list>', 'with --user: comma-separated groups (O), e.g. team-a,viewers', '')
    .option('--expiry <duration>', 'lifetime, e.g. 10m, 24h, 30d (default: 24h for a token, 720h for a certificate)')
    .addHelpText(
      'after',
      [
        '',
        "The kubeconfig names this controller's API URL and embeds the cluster CA. It is printed, never stored:",
        'keep it secret. Grant access with RBAC first, e.g.:',
        '  kctl kubectl create serviceaccount watcher -n operators',
        '  kctl kubectl create clusterrole widget-reader --verb=get,list,watch --resource=widgets.example.com',
        '  kctl kubectl create clusterrolebinding watcher --clusterrole=widget-reader --serviceaccount=operators:watcher',
        '  kctl kubeconfig create --service-account operators/watcher --expiry 24h > watcher.conf',
        'A certificate cannot be revoked before it expires (remove its RBAC bindings instead).',
      ].join('\n'),
    )
    .action(async (opts: { serviceAccount?: string; user?: string; groups: string; expiry?: string }, cmd: Command) => {
      if (!!opts.serviceAccount === !!opts.user)
        throw new UserError('give exactly one of --service-account NS/NAME or --user NAME');
      if (opts.groups && !opts.user)
        throw new UserError("--groups goes with --user (a service account's groups come from its namespace)");
      const { dataDir } = globals(cmd);
      const cfgFile = join(dataDir, 'cluster-config.yaml');
      if (!existsSync(cfgFile) || !existsSync(adminConf(dataDir)))
        throw new UserError(`no controller data at ${dataDir}; run this on a controller host (or pass its --data-dir)`);
      const cfg = await loadConfig(cfgFile);
      const pki = pkiPaths(join(dataDir, 'pki'));
      const text = opts.serviceAccount
        ? await serviceAccountKubeconfig(
            new KubeClient(credentialsFromKubeconfig(adminConf(dataDir))),
            cfg,
            pki,
            parseServiceAccount(opts.serviceAccount),
            parseExpiry(opts.expiry ?? '24h'),
          )
        : await userKubeconfig(
            cfg,
            pki,
            { name: opts.user!, groups: opts.groups.split(',').filter(Boolean) },
            parseExpiry(opts.expiry ?? '720h'),
          );
      process.stdout.write(text);
    });
}

export function configCommand(program: Command): void {
  const c = program.command('config').description('cluster configuration files');
  c.command('create')
    .description('print a full ClusterConfig with every default filled in')
    .action(() => {
      process.stdout.write(defaultConfigYaml());
    });
}

// main() hands over everything after the word `kubectl` untouched, so kubectl's own flags
// (-n, -o, --help ...) never meet kctl's parser.
let kubectlArgs: string[] = [];

/** kctl's flags that kubectl does not have: after `kubectl` they are still kctl's. */
const KCTL_FLAGS = ['--data-dir', '--run-dir'];

/**
 * Splits what follows `kctl kubectl` into kctl's own --data-dir / --run-dir (with their values)
 * and kubectl's arguments. After `--` everything is kubectl's (a command run by kubectl exec).
 */
export function splitKubectlArgs(args: string[]): { kctl: string[]; kubectl: string[] } {
  const kctl: string[] = [];
  const kubectl: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '--') {
      kubectl.push(...args.slice(i));
      break;
    }
    if (KCTL_FLAGS.includes(a)) {
      kctl.push(a, ...args.slice(i + 1, i + 2)); // a missing value is commander's error to report
      i++;
    } else if (KCTL_FLAGS.some((f) => a.startsWith(`${f}=`))) {
      kctl.push(a);
    } else {
      kubectl.push(a);
    }
  }
  return { kctl, kubectl };
}

export function setKubectlArgs(args: string[]): void {
  kubectlArgs = args;
}

export function kubectlCommand(program: Command): void {
  program
    .command('kubectl')
    .description('run the bundled kubectl (uses the admin kubeconfig unless KUBECONFIG or --kubeconfig is given)')
    .helpOption(false)
    .allowUnknownOption()
    .allowExcessArguments()
    .argument('[args...]', 'kubectl arguments, passed through untouched')
    .action(async (_args: string[], _opts: unknown, cmd: Command) => {
      const args = kubectlArgs;
      const g = globals(cmd);
      let kubectl = join(g.binRoot, CURRENT, 'kubectl');
      if (!existsSync(kubectl)) {
        // Logs on stderr: stdout is kubectl's.
        const log = createLogger({ debug: g.debug, destination: process.stderr });
        kubectl = join(await stageOwn(g.binRoot, ['controller'], componentLogger(log, 'stage')), 'kubectl');
      }
      const env: Record<string, string> = {};
      const explicit =
        process.env.KUBECONFIG || args.some((a) => a === '--kubeconfig' || a.startsWith('--kubeconfig='));
      if (!explicit && existsSync(adminConf(g.dataDir))) env.KUBECONFIG = adminConf(g.dataDir);
      const r = await execa(kubectl, args, { stdio: 'inherit', reject: false, env });
      process.exitCode = r.exitCode ?? 1;
    });
}
