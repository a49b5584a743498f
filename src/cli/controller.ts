import { Option, type Command } from 'commander';
import { runController } from '../controller/index.ts';
import { globals, loggerFor } from './globals.ts';
import { readTokenFile } from './worker.ts';

export function controllerCommand(program: Command): void {
  program
    .command('controller')
    .description('run the control plane on this host: etcd or kine, kube-apiserver, kube-scheduler, kube-controller-manager')
    .option('--config <file>', 'ClusterConfig YAML file (see: kctl config create)')
    .option('--single', 'single-host control plane; storage defaults to kine (SQLite)')
    .addOption(new Option('--storage <type>', 'storage backend (overrides spec.storage.type)').choices(['etcd', 'kine']))
    .option(
      '--api-only',
      'the Kubernetes API alone, for CRDs and operators: no scheduler, no konnectivity, no workers (spec.profile: api-only; storage defaults to kine)',
    )
    .option('--init-only', 'prepare everything (staged binaries, PKI, kubeconfigs) and exit')
    .option('--token-file <file>', 'join a running cluster as one more controller, with a token from `kctl token create --role controller`')
    .addHelpText(
      'after',
      [
        '',
        'Stops all components in reverse order on SIGTERM or SIGINT. `kctl status` shows their state.',
        '',
        'High availability: on a running controller, `kctl token create --role controller`; on the new control',
        'host, `kctl controller --config kctl.yaml --token-file F` (same spec.storage and spec.network as the',
        'cluster, its own spec.api.address). It fetches the shared CAs and keys from the join endpoint',
        '(spec.api.joinPort, 9443) of a running controller and, with etcd, joins as a learner that is',
        'promoted once it has caught up. Later starts need no token. `kctl etcd member-list` shows members.',
        '',
        'API-only (--api-only or spec.profile: api-only): the Kubernetes API alone for CRDs and operators.',
        'kine (SQLite) by default, kube-apiserver without workload APIs, a controller-manager with namespace,',
        'garbage-collector, service-account and cluster-role-aggregation controllers; no scheduler, no',
        'konnectivity, no workers. Give each tenant on a host its own --data-dir, --run-dir and ports',
        '(spec.api.port, spec.controllerManager.port).',
      ].join('\n'),
    )
    .action(
      async (
        opts: { config?: string; single?: boolean; apiOnly?: boolean; storage?: 'etcd' | 'kine'; initOnly?: boolean; tokenFile?: string },
        cmd: Command,
      ) => {
        const g = globals(cmd);
        const token = opts.tokenFile ? (await readTokenFile(opts.tokenFile)).trim() : undefined;
        await runController(
          {
            configFile: opts.config,
            single: opts.single,
            apiOnly: opts.apiOnly,
            storage: opts.storage,
            initOnly: opts.initOnly,
            token,
            dataDir: g.dataDir,
            runDir: g.runDir,
          },
          loggerFor(cmd),
        );
      },
    );
}
