// kctl backup --save-path DIR / kctl restore ARCHIVE: a controller's PKI, config and datastore in
// one archive (see controller/backup.ts).
import type { Command } from 'commander';
import { resolve } from 'node:path';
import { backupController, restoreController } from '../controller/backup.ts';
import { componentLogger } from '../base/log.ts';
import { globals, loggerFor } from './support/globals.ts';

export function backupCommands(program: Command): void {
  program
    .command('backup')
    .description("save a controller's PKI (CA keys included), config and datastore to kctl-backup-<time>.tar.gz (0600)")
    .requiredOption('--save-path <dir>', 'directory to write the archive into')
    .addHelpText(
      'after',
      '\netcd: a snapshot through the running etcd. kine on SQLite: an online copy of the database.\nkine on PostgreSQL or MySQL: back that database up with its own tools; the archive holds the rest.\nThe archive holds the cluster CA keys: keep it like them.',
    )
    .action(async (f: { savePath: string }, cmd: Command) => {
      const g = globals(cmd);
      const file = await backupController({
        dataDir: resolve(g.dataDir),
        runDir: g.runDir,
        savePath: resolve(f.savePath),
        log: componentLogger(loggerFor(cmd), 'backup'),
      });
      process.stdout.write(`${file}\n`);
    });

  program
    .command('restore')
    .description('restore a kctl backup into an empty data dir (every member is checked against the manifest first)')
    .argument('<archive>', 'kctl-backup-<time>.tar.gz')
    .addHelpText('after', '\nThen start the controller with the same config (kctl controller or kctl start); workers reconnect without a new token.')
    .action(async (archive: string, _f: unknown, cmd: Command) => {
      const g = globals(cmd);
      const m = await restoreController({ archive: resolve(archive), dataDir: resolve(g.dataDir), log: componentLogger(loggerFor(cmd), 'restore') });
      process.stdout.write(
        `restored ${m.members.length} files (${m.storage.datastore}, kctl ${m.kctlVersion}, ${m.createdAt}) into ${resolve(g.dataDir)}\n`,
      );
    });
}
