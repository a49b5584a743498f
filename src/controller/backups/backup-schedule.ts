// Scheduled backups (spec.backup.schedule): every controller runs this component, and the one
// holding the kctl-backup Lease (kube/leader-lease.ts) makes the backups, with the same code as
// `kctl backup`, into spec.backup.path on its own host.
//
// When: one interval after the newest of kctl's archives in that path, or, when there is none,
// one interval after this controller started (so a restarted controller whose last archive is
// old backs up at once, and a new one does not back up while it is still coming up). A failed
// run is logged, shown in `kctl status` and tried again one interval later, at most 5 minutes.
// After a good run, kctl's own archives in that path beyond spec.backup.retention are deleted,
// oldest first; other files (and the .partial of a run in progress) are never touched.
// The holder writes its last result into the Lease, so every controller's status shows it.
import { lstat, mkdir, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Component, ComponentContext, ComponentStatus } from '../../base/component.ts';
import { parseDuration } from '../../base/duration.ts';
import { messageOf } from '../../base/errors.ts';
import type { Logger } from '../../base/log.ts';
import type { KubeClient } from '../../kube/client.ts';
import { LeaderLease } from '../../kube/leader-lease.ts';
import { readBackupKey } from './backup-cipher.ts';
import { backupController, defaultBackupPath, type BackupOptions } from './backup.ts';
import type { ClusterConfig } from '../config/config.ts';
import type { ControllerPaths } from '../config/paths.ts';

export const BACKUP_LEASE = 'kctl-backup';
const LAST_BACKUP_ANNOTATION = 'kctl.dev/last-backup';
const RENEW_EVERY_MS = 5_000;
const MAX_RETRY_MS = 5 * 60_000;
const ARCHIVE_NAME = /^kctl-backup-(\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z)\.tar\.gz(\.enc)?$/;

/** One backup run's outcome. */
export interface BackupRecord {
  /** When it started (ISO time). */
  at: string;
  /** The controller (its lease name) that ran it. */
  controller: string;
  result: 'ok' | 'failed';
  file?: string;
  reason?: string;
}

/** What `kctl status` shows about scheduled backups. */
export interface BackupStatus {
  schedule: string;
  retention: number;
  path: string;
  encrypted: boolean;
  /** The controller that holds the backup lease ('' when none does, as far as this one knows). */
  leaseHolder: string;
  /** The last run: this controller's own, else the one the holder published in the lease. */
  last?: BackupRecord;
  /** When the next run is due (only known to the holder). */
  nextDue?: string;
}

/** The time in a kctl archive's name (ms), or undefined when the name is not kctl's. */
export function archiveTime(name: string): number | undefined {
  const m = ARCHIVE_NAME.exec(name);
  if (!m) return undefined;
  const [d, t] = m[1]!.split('T') as [string, string];
  const [hh, mm, ss, ms] = t.replace('Z', '').split('-');
  const at = Date.parse(`${d}T${hh}:${mm}:${ss}.${ms}Z`);
  return Number.isFinite(at) ? at : undefined;
}

/** Of the names in a directory, kctl's archives beyond the newest `keep`, oldest first. */
export function archivesToPrune(names: string[], keep: number): string[] {
  const archives = names
    .filter((n) => archiveTime(n) !== undefined)
    .sort((a, b) => archiveTime(b)! - archiveTime(a)! || b.localeCompare(a));
  return archives.slice(keep).reverse();
}

export interface BackupSchedulerOptions {
  cfg: ClusterConfig;
  paths: ControllerPaths;
  kube: KubeClient;
  /** This controller's lease name: the backup lease's holder when it takes it. */
  identity: string;
  /** The backup itself; default backupController (tests pass a fake). */
  backup?: (o: BackupOptions) => Promise<string>;
  now?: () => number;
}

export class BackupSchedulerComponent implements Component {
  readonly name = 'backup-scheduler';
  private readonly intervalMs: number;
  private readonly path: string;
  private readonly lease: LeaderLease;
  private readonly now: () => number;
  private log!: Logger;
  private startedAt = 0;
  private timer: NodeJS.Timeout | undefined;
  private renewing: Promise<void> | undefined;
  private running: Promise<void> | undefined;
  private renewedAt = 0;
  private wasHolding = false;
  /** The newest archive's time in the path (read when this controller takes the lease, then kept). */
  private newestArchive: number | undefined;
  private last: BackupRecord | undefined;
  private leaseError: string | undefined;

  constructor(private readonly o: BackupSchedulerOptions) {
    const b = o.cfg.spec.backup;
    this.intervalMs = parseDuration(b.schedule ?? '', { days: true }) ?? 0;
    this.path = defaultBackupPath(o.cfg, o.paths.dataDir);
    this.now = o.now ?? Date.now;
    this.lease = new LeaderLease(o.kube, BACKUP_LEASE, o.identity, this.now);
  }

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
    const keyFile = this.o.cfg.spec.backup.encryptionKeyFile;
    // A bad key file stops the controller here, with one line, rather than every backup later.
    if (keyFile) await readBackupKey(keyFile);
    else
      this.log.warn(
        { path: this.path },
        'scheduled backups hold the cluster CA keys unencrypted: set spec.backup.encryptionKeyFile',
      );
    await mkdir(this.path, { recursive: true, mode: 0o700 });
  }

  async start(): Promise<void> {
    this.startedAt = this.now();
    this.timer = setInterval(() => this.tick(), 1000);
    this.tick();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.renewing;
    await this.running;
    await this.lease.release();
  }

  status(): Partial<ComponentStatus> {
    const failed = this.last?.result === 'failed' ? `last backup failed: ${this.last.reason}` : undefined;
    return { lastError: this.leaseError ?? failed };
  }

  report(): BackupStatus {
    const b = this.o.cfg.spec.backup;
    const due = this.lease.holding() ? this.dueAt() : undefined;
    return {
      schedule: b.schedule ?? '',
      retention: b.retention,
      path: this.path,
      encrypted: b.encryptionKeyFile !== undefined,
      leaseHolder: this.lease.holder(),
      last: this.last ?? this.published(),
      ...(due !== undefined ? { nextDue: new Date(due).toISOString() } : {}),
    };
  }

  /** The record the holder wrote into the lease, if it reads as one. */
  private published(): BackupRecord | undefined {
    const text = this.lease.annotations()[LAST_BACKUP_ANNOTATION];
    if (!text) return undefined;
    try {
      const r = JSON.parse(text) as BackupRecord;
      return typeof r.at === 'string' && (r.result === 'ok' || r.result === 'failed') ? r : undefined;
    } catch {
      return undefined;
    }
  }

  private tick(): void {
    if (!this.renewing && this.now() - this.renewedAt >= RENEW_EVERY_MS)
      this.renewing = this.renew().finally(() => (this.renewing = undefined));
    const due = this.dueAt();
    if (!this.running && this.lease.holding() && due !== undefined && this.now() >= due)
      this.running = this.run().finally(() => (this.running = undefined));
  }

  private async renew(): Promise<void> {
    this.renewedAt = this.now();
    const record = this.last ?? this.published();
    try {
      const held = await this.lease.tryAcquireOrRenew(
        record ? { [LAST_BACKUP_ANNOTATION]: JSON.stringify(record) } : {},
      );
      this.leaseError = undefined;
      if (held && !this.wasHolding) {
        this.newestArchive = await this.newestArchiveTime();
        this.log.info({ path: this.path }, 'holding the backup lease: this controller makes the scheduled backups');
      }
      if (!held && this.wasHolding)
        this.log.info({ holder: this.lease.holder() }, 'the backup lease went to another controller');
      this.wasHolding = held;
    } catch (err) {
      this.leaseError = `cannot renew the backup lease: ${messageOf(err)}`;
      if (this.wasHolding && !this.lease.holding()) {
        this.log.warn(
          { err: messageOf(err) },
          'lost the backup lease (cannot reach the API): no scheduled backups from here until it is back',
        );
        this.wasHolding = false;
      }
    }
  }

  /** When the next run is due (ms), or undefined before the newest archive is known. */
  private dueAt(): number | undefined {
    if (this.last?.result === 'failed') return Date.parse(this.last.at) + Math.min(this.intervalMs, MAX_RETRY_MS);
    if (!this.wasHolding) return undefined;
    return (this.newestArchive ?? this.startedAt) + this.intervalMs;
  }

  private async run(): Promise<void> {
    const at = this.now();
    const record: BackupRecord = { at: new Date(at).toISOString(), controller: this.lease.identity, result: 'ok' };
    try {
      const keyFile = this.o.cfg.spec.backup.encryptionKeyFile;
      const key = keyFile ? await readBackupKey(keyFile) : undefined;
      record.file = await (this.o.backup ?? backupController)({
        dataDir: this.o.paths.dataDir,
        runDir: this.o.paths.runDir,
        savePath: this.path,
        log: this.log,
        key,
      });
      this.newestArchive = at;
      const pruned = await this.prune();
      this.log.info({ file: record.file, pruned }, 'scheduled backup written');
    } catch (err) {
      record.result = 'failed';
      record.reason = messageOf(err);
      this.log.error({ err: record.reason }, 'scheduled backup failed; trying again at the next interval');
    }
    this.last = record;
    // Published at once, not at the next renewal.
    this.renewedAt = 0;
  }

  /** Deletes kctl's archives beyond the retention count (regular files only); returns their names. */
  private async prune(): Promise<string[]> {
    const gone: string[] = [];
    for (const name of archivesToPrune(await readdir(this.path), this.o.cfg.spec.backup.retention)) {
      const file = join(this.path, name);
      if (!(await lstat(file)).isFile()) continue;
      await rm(file);
      gone.push(name);
    }
    return gone;
  }

  private async newestArchiveTime(): Promise<number | undefined> {
    const times = (await readdir(this.path).catch(() => [] as string[]))
      .map(archiveTime)
      .filter((t) => t !== undefined);
    return times.length ? Math.max(...times) : undefined;
  }
}
