import { Option, type Command } from 'commander';
import { join } from 'node:path';
import { componentLogger } from '../log/logger.ts';
import { findPayload } from '../payload/payload.ts';
import { stageComponents } from '../payload/stage.ts';
import { KCTL_VERSION } from '../version.ts';
import { UserError } from './errors.ts';
import { globals, loggerFor } from './globals.ts';

export function controllerCommand(program: Command): void {
  program
    .command('controller')
    .description('run the control plane on this host (etcd|kine, kube-apiserver, scheduler, controller-manager, konnectivity server)')
    .option('--config <file>', 'ClusterConfig YAML file')
    .option('--single', 'single-host control plane (kine storage by default)')
    .addOption(new Option('--storage <type>', 'storage backend').choices(['etcd', 'kine']))
    .option('--init-only', 'prepare everything (PKI, staged binaries, config files) and exit')
    .action(async (opts: { initOnly?: boolean }, cmd: Command) => {
      const g = globals(cmd);
      const log = loggerFor(cmd);
      const payload = await findPayload(KCTL_VERSION);
      await stageComponents(payload, join(g.dataDir, 'bin'), ['controller'], componentLogger(log, 'stage'));
      if (opts.initOnly) {
        log.info({ dataDir: g.dataDir }, 'controller initialised (--init-only)');
        return;
      }
      throw new UserError('running the control plane is not available in this build yet; use --init-only to prepare the data dir');
    });
}
