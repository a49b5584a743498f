import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { httpsUrl } from '../base/addresses.ts';
import { UserError } from '../base/errors.ts';
import { writeFileAtomic } from '../base/fs.ts';
import { loadConfig, type ClusterConfig } from '../controller/config/config.ts';
import { localEtcd } from '../controller/components/storage.ts';
import { leftMarker } from '../controller/join/join.ts';
import { controllerPaths } from '../controller/config/paths.ts';
import { listMembers, removeMember, retryTransient, type EtcdMember } from '../etcd/members.ts';
import { pkiPaths } from '../pki/index.ts';
import { globals } from './support/globals.ts';
import { outputOption, printJson, type OutputFormat } from './support/output.ts';

async function etcdConfig(dataDir: string): Promise<ClusterConfig> {
  const cfgFile = join(dataDir, 'cluster-config.yaml');
  if (!existsSync(cfgFile))
    throw new UserError(`no controller config at ${cfgFile}; run this on a controller host (or pass its --data-dir)`);
  const cfg = await loadConfig(cfgFile);
  if (cfg.spec.storage.type !== 'etcd')
    throw new UserError(
      `this controller stores its state in ${cfg.spec.storage.type}, not etcd: there are no etcd members`,
    );
  return cfg;
}

const selfPeerUrl = (cfg: ClusterConfig) => httpsUrl(cfg.spec.api.address, cfg.spec.storage.etcd.peerPort);

export function etcdCommands(program: Command): void {
  const etcd = program.command('etcd').description('the etcd cluster of the controllers (etcd storage)');
  etcd
    .command('member-list')
    .description("list etcd members: name, id, peer URL, voter or learner (asks this controller's etcd)")
    .addOption(outputOption())
    .action(async (opts: { output: OutputFormat }, cmd: Command) => {
      const { dataDir } = globals(cmd);
      const cfg = await etcdConfig(dataDir);
      const tls = localEtcd(cfg, pkiPaths(join(dataDir, 'pki')));
      const members = await retryTransient(() => listMembers(tls)).catch((err: Error) => {
        throw new UserError(`cannot list etcd members: ${err.message}; is this controller running?`);
      });
      const self = selfPeerUrl(cfg);
      if (opts.output === 'json') {
        printJson(members.map((m) => ({ ...m, self: m.peerURLs.includes(self) })));
        return;
      }
      const rows = [
        ['NAME', 'ID', 'PEER URL', 'ROLE', ''],
        ...members.map((m: EtcdMember) => [
          m.name || '(not started)',
          m.id,
          m.peerURLs.join(','),
          m.isLearner ? 'learner' : 'voter',
          m.peerURLs.includes(self) ? '(this controller)' : '',
        ]),
      ];
      const w = [0, 1, 2, 3].map((i) => Math.max(...rows.map((r) => r[i]!.length)));
      process.stdout.write(
        rows
          .map((r) =>
            r
              .map((c, i) => (i < 4 ? c.padEnd(w[i]!) : c))
              .join('  ')
              .trimEnd(),
          )
          .join('\n') + '\n',
      );
    });
  etcd
    .command('leave')
    .description('remove this controller from the etcd cluster, before it is shut down for good')
    .option(
      '--peer-address <address>',
      'remove another member instead, by the address in its peer URL: a controller whose host is gone for good (run on a live one)',
    )
    .addHelpText(
      'after',
      '\nWithout --peer-address: afterwards stop this controller (kctl stop, or SIGTERM); it refuses to start on this data dir again until kctl reset.',
    )
    .action(async (opts: { peerAddress?: string }, cmd: Command) => {
      const { dataDir, runDir } = globals(cmd);
      const cfg = await etcdConfig(dataDir);
      const tls = localEtcd(cfg, pkiPaths(join(dataDir, 'pki')));
      const members = await retryTransient(() => listMembers(tls)).catch((err: Error) => {
        throw new UserError(`cannot list etcd members: ${err.message}; is this controller running?`);
      });
      const selfUrl = selfPeerUrl(cfg);
      const wanted = opts.peerAddress;
      const target = wanted
        ? members.find((m) =>
            m.peerURLs.some((u) => new URL(u).hostname.replace(/^\[|\]$/g, '') === wanted.replace(/^\[|\]$/g, '')),
          )
        : members.find((m) => m.peerURLs.includes(selfUrl));
      if (!target)
        throw new UserError(
          wanted
            ? `no etcd member has peer address ${wanted}; see kctl etcd member-list`
            : `this controller (${selfUrl}) is not an etcd member`,
        );
      if (wanted && target.peerURLs.includes(selfUrl))
        throw new UserError(`${wanted} is this controller; run kctl etcd leave without --peer-address to remove it`);
      if (members.length === 1)
        throw new UserError(
          'this controller is the only etcd member; leaving would lose the cluster (use kctl reset to end it)',
        );
      await retryTransient(() => removeMember(tls, target.id)).catch((err: Error) => {
        // A member removing itself through its own endpoint may stop before it answers: etcd stops
        // a member once it has applied that member's removal, so "server stopped" means it is out.
        if (!wanted && /server stopped/.test(err.message)) return;
        throw new UserError(`etcd refused to remove member ${target.name || target.id}: ${err.message}`);
      });
      if (wanted) {
        process.stdout.write(
          `removed etcd member ${target.name || '(not started)'} (${target.id}, ${target.peerURLs.join(',')})\n`,
        );
        return;
      }
      await writeFileAtomic(
        leftMarker(controllerPaths(dataDir, runDir)),
        `${new Date().toISOString()} ${target.id}\n`,
        0o600,
      );
      process.stdout.write(`left the etcd cluster (member ${target.name}, ${target.id}); stop this controller now\n`);
    });
}
