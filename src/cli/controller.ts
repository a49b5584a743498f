import { Option, type Command } from 'commander';
import { runController } from '../controller/index.ts';
import { globals, loggerFor } from './globals.ts';

export function controllerCommand(program: Command): void {
  program
    .command('controller')
    .description('run the control plane on this host: etcd or kine, kube-apiserver, kube-scheduler, kube-controller-manager')
    .option('--config <file>', 'ClusterConfig YAML file (see: kctl config create)')
    .option('--single', 'single-host control plane; storage defaults to kine (SQLite)')
    .addOption(new Option('--storage <type>', 'storage backend (overrides spec.storage.type)').choices(['etcd', 'kine']))
    .option('--init-only', 'prepare everything (staged binaries, PKI, kubeconfigs) and exit')
    .addHelpText('after', '\nStops all components in reverse order on SIGTERM or SIGINT. `kctl status` shows their state.')
    .action(async (opts: { config?: string; single?: boolean; storage?: 'etcd' | 'kine'; initOnly?: boolean }, cmd: Command) => {
      const g = globals(cmd);
      await runController(
        { configFile: opts.config, single: opts.single, storage: opts.storage, initOnly: opts.initOnly, dataDir: g.dataDir, runDir: g.runDir },
        loggerFor(cmd),
      );
    });
}
