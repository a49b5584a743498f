// kctl backup [--save-path DIR] [--encryption-key-file F] / kctl backup key create FILE /
// kctl restore ARCHIVE [--encryption-key-file F]: a controller's PKI, config and datastore in one
// archive (see controller/backups/backup.ts), sealed with a key when one is given (controller/backups/backup-cipher.ts).
import type { Command } from 'commander';
import { mkdir } from 'node:fs/promises';
import { resolve } from 'node:path';
import {
  backupController,
  defaultBackupPath,
  effectiveConfig,
  restoreController,
} from '../controller/backups/backup.ts';
import { createBackupKey, readBackupKey } from '../controller/backups/backup-cipher.ts';
import { componentLogger } from '../base/log.ts';
import { globals, loggerFor } from './support/globals.ts';

const BACKUP_HELP = `
Datastore: etcd -> a snapshot through the running etcd. kine on SQLite -> an online copy of the database.
kine on PostgreSQL or MySQL -> back that database up with its own tools; the archive holds the rest.

The archive holds the cluster CA keys. With an encryption key (--encryption-key-file, else
spec.backup.encryptionKeyFile) it is sealed with AES-256-GCM as kctl-backup-<time>.tar.gz.enc and
cannot be read or altered without the key; without one kctl warns and writes it in the clear.
A key file is 32 random bytes in base64 on one line, mode 0600:
  kctl backup key create /etc/kctl/backup.key     (or: openssl rand -base64 32 > F; chmod 600 F)
Keep the key away from the archives: whoever has both has the CA keys. Losing it loses the archives.

Scheduled backups: spec.backup.schedule (e.g. 6h), retention, path, encryptionKeyFile in the config.`;

const RESTORE_HELP = `
An encrypted archive (.tar.gz.enc) needs its key: --encryption-key-file F. A wrong key, or an archive
altered, cut off or extended anywhere, is refused with one line before anything is written.
Then start the controller with the same config (kctl controller or kctl start); workers reconnect without a new token.`;

export function backupCommands(program: Command): void {
  const backup = program
    .command('backup')
    .description(
      "save a controller's PKI (CA keys included), config and datastore to kctl-backup-<time>.tar.gz[.enc] (0600)",
    )
    .option(
      '--save-path <dir>',
      'directory to write the archive into (default: spec.backup.path, else <data-dir>/backups)',
    )
    .option('--encryption-key-file <file>', 'seal the archive with this key (default: spec.backup.encryptionKeyFile)')
    .addHelpText('after', BACKUP_HELP)
    .action(async (f: { savePath?: string; encryptionKeyFile?: string }, cmd: Command) => {
      const g = globals(cmd);
      const dataDir = resolve(g.dataDir);
      const log = componentLogger(loggerFor(cmd), 'backup');
      const cfg = await effectiveConfig(dataDir);
      const keyFile = f.encryptionKeyFile ? resolve(f.encryptionKeyFile) : cfg.spec.backup.encryptionKeyFile;
      const key = keyFile ? await readBackupKey(keyFile) : undefined;
      let savePath = f.savePath ? resolve(f.savePath) : undefined;
      if (!savePath) await mkdir((savePath = defaultBackupPath(cfg, dataDir)), { recursive: true, mode: 0o700 });
      // One plain line on stderr (stdout carries only the archive's path, for scripts).
      if (!key)
        process.stderr.write(
          'kctl: warning: the archive holds the cluster CA keys unencrypted: keep it like them, or give --encryption-key-file\n',
        );
      const file = await backupController({ dataDir, runDir: g.runDir, savePath, log, key });
      process.stdout.write(`${file}\n`);
    });

  backup
    .command('key')
    .description('backup encryption keys')
    .command('create')
    .description('write a new backup encryption key (32 random bytes, base64, mode 0600) to FILE; never replaces one')
    .argument('<file>', 'where to write the key')
    .action(async (file: string) => {
      await createBackupKey(resolve(file));
      process.stdout.write(`${resolve(file)}\n`);
    });

  program
    .command('restore')
    .description('restore a kctl backup into an empty data dir (every member is checked against the manifest first)')
    .argument('<archive>', 'kctl-backup-<time>.tar.gz or .tar.gz.enc')
    .option('--encryption-key-file <file>', 'the key an encrypted archive was sealed with')
    .addHelpText('after', RESTORE_HELP)
    .action(async (archive: string, f: { encryptionKeyFile?: string }, cmd: Command) => {
      const g = globals(cmd);
      const m = await restoreController({
        archive: resolve(archive),
        dataDir: resolve(g.dataDir),
        log: componentLogger(loggerFor(cmd), 'restore'),
        keyFile: f.encryptionKeyFile ? resolve(f.encryptionKeyFile) : undefined,
      });
      process.stdout.write(
        `restored ${m.members.length} files (${m.storage.datastore}, kctl ${m.kctlVersion}, ${m.createdAt}) into ${resolve(g.dataDir)}\n`,
      );
    });
}
