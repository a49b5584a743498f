import { Option, type Command } from 'commander';
import { UserError } from '../base/errors.ts';
import { MEMBER_NAME_ENV } from '../kube/controller-leases.ts';
import { runController } from '../controller/index.ts';
import { globals, loggerFor } from './support/globals.ts';
import { readTokenFile } from './worker.ts';
import { DEFAULT_PORT_RANGE, parsePortRange } from '../controller/tenants/tenants.ts';

/** A member name: part of a Lease's name, so a DNS subdomain's characters, short enough for the prefix. */
export function parseMemberName(v: string): string {
  if (!/^[a-z0-9]([-a-z0-9.]{0,198}[a-z0-9])?$/.test(v))
    throw new UserError(
      `--member-name ${JSON.stringify(v)}: expected lower-case letters, digits, '-' and '.' (at most 200, starting and ending with a letter or digit), such as the pod's name`,
    );
  return v;
}

export function controllerCommand(program: Command): void {
  program
    .command('controller')
    .description(
      'run the control plane on this host: etcd or kine, kube-apiserver, kube-scheduler, kube-controller-manager',
    )
    .option('--config <file>', 'ClusterConfig YAML file (see: kctl config create)')
    .option('--single', 'single-host control plane; storage defaults to kine (SQLite)')
    .addOption(
      new Option('--storage <type>', 'storage backend (overrides spec.storage.type)').choices(['etcd', 'kine']),
    )
    .option(
      '--api-only',
      'the Kubernetes API alone, for CRDs and operators: no scheduler, no konnectivity, no workers (spec.profile: api-only; storage defaults to kine)',
    )
    .option(
      '--port-range <from-to>',
      `with --name: where a new tenant's ports are picked (kept across restarts)`,
      DEFAULT_PORT_RANGE,
    )
    .option('--init-only', 'prepare everything (staged binaries, PKI, kubeconfigs) and exit')
    .addOption(
      new Option(
        '--shared-pki <dir>',
        "the cluster's CAs, service-account and encryption keys from <dir> (a mounted Secret, as kctl pki save-shared writes it): for a control plane in a pod, whose data dir dies with it",
      ).conflicts('tokenFile'),
    )
    .addOption(
      new Option(
        '--member-name <name>',
        "this controller's name among the cluster's controllers (its lease, its turn in upgrades), where several share one address: the pods of a hosted cluster behind one Service; default from spec.api.address",
      )
        .env(MEMBER_NAME_ENV)
        .argParser(parseMemberName),
    )
    .option(
      '--token-file <file>',
      'join a running cluster as one more controller, with a token from `kctl token create --role controller`',
    )
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
        'konnectivity, no workers.',
        '',
        'Tenants: `kctl controller --name NAME` runs one control plane of many on this host, in',
        '<data-dir>/tenants/NAME and <run-dir>/tenants/NAME with its own CA and keys, sharing the one staged',
        '<data-dir>/bin. A tenant is api-only unless its --config says spec.profile: full: then it is a whole',
        'cluster (scheduler, konnectivity server, join endpoint, add-ons) whose workers join with a token from',
        '`kctl --name NAME token create --role worker`. Its first start picks free ports from --port-range',
        '(API, controller-manager; for full also join, agent, admin and scheduler; for etcd its two) and',
        'records them in tenant.json; every restart keeps them. A tenant keeps its profile. A full one can run',
        'on several controller hosts (kine on a shared PostgreSQL): `kctl --name NAME token create --role',
        'controller` on one, then `kctl --name NAME controller --config F --token-file T` on another.',
        'With kine on PostgreSQL and no database in spec.storage.kine.dataSource,',
        'each tenant gets its own database kctl_NAME (created if the role may). kctl tenant list shows all',
        'tenants; kctl --name NAME status, kctl --name NAME kubectl ..., kctl --name NAME kubeconfig create work',
        'on one. Under systemd: kctl install controller --name NAME (unit kctl-controller@NAME.service).',
      ].join('\n'),
    )
    .action(
      async (
        opts: {
          config?: string;
          single?: boolean;
          apiOnly?: boolean;
          storage?: 'etcd' | 'kine';
          initOnly?: boolean;
          tokenFile?: string;
          sharedPki?: string;
          memberName?: string;
          portRange: string;
        },
        cmd: Command,
      ) => {
        const g = globals(cmd);
        const portRange = parsePortRange(opts.portRange);
        const token = opts.tokenFile ? (await readTokenFile(opts.tokenFile)).trim() : undefined;
        await runController(
          {
            configFile: opts.config,
            single: opts.single,
            apiOnly: opts.apiOnly,
            storage: opts.storage,
            initOnly: opts.initOnly,
            token,
            sharedPki: opts.sharedPki,
            memberName: opts.memberName,
            dataDir: g.dataDir,
            runDir: g.runDir,
            tenant: g.tenant && { ...g.tenant, portRange },
          },
          loggerFor(cmd),
        );
      },
    );
}
