// kctl backup / kctl restore: one kctl-backup-<time>.tar.gz with everything a controller needs to
// come back (PKI with the CA keys, the effective config, the datastore) and a manifest with the
// sha256 of every member. Restore goes into an empty data dir only and checks every sha256
// before it writes anything there.
//
// The datastore: etcd -> a snapshot through etcd's API (etcdctl snapshot save), restored with
// etcdutl; kine on SQLite -> an online copy through SQLite's backup API (consistent while kine
// writes); kine on another database -> not in the archive: that database is the operator's to
// back up, and the manifest says so.
//
// With an encryption key the archive is kctl-backup-<time>.tar.gz.enc: the same tar.gz, sealed
// as backup-cipher.ts describes; restore needs the key and checks every chunk before unpacking.
import { createReadStream, createWriteStream, existsSync } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import {
  chmod,
  cp,
  mkdir,
  mkdtemp,
  open,
  readFile,
  readdir,
  rename,
  rm,
  rmdir,
  stat,
  writeFile,
} from 'node:fs/promises';
import { hostname } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { backup as sqliteBackup, DatabaseSync } from 'node:sqlite';
import { execa } from 'execa';
import { parse } from 'yaml';
import * as tar from 'tar';
import { httpsUrl } from '../../base/addresses.ts';
import { reasonOf, UserError } from '../../base/errors.ts';
import { sha256OfFile } from '../../base/fs.ts';
import type { Logger } from '../../base/log.ts';
import { KCTL_VERSION } from '../../base/version.ts';
import { etcdClientUrl } from '../../etcd/etcd.ts';
import { stageOwn } from '../../payload/stage-child.ts';
import { pkiPaths } from '../../pki/index.ts';
import { liveOwner } from '../../supervisor/owner.ts';
import { BackupCipherError, cipherStream, isEncryptedArchive, Opener, readBackupKey, Sealer } from './backup-cipher.ts';
import { parseConfig, type ClusterConfig } from '../config/config.ts';
import { controllerPaths } from '../config/paths.ts';

const MANIFEST = 'manifest.json';
const CONFIG = 'cluster-config.yaml';
const ETCD_SNAPSHOT = 'etcd.snapshot';
const SQLITE_COPY = 'state.db';

export interface BackupManifest {
  kctlVersion: string;
  createdAt: string;
  storage: { type: 'etcd' | 'kine'; datastore: 'etcd-snapshot' | 'sqlite' | 'external'; note?: string };
  members: { path: string; sha256: string; size: number }[];
}

async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await filesUnder(p)));
    else out.push(p);
  }
  return out;
}

export async function effectiveConfig(dataDir: string): Promise<ClusterConfig> {
  const file = join(dataDir, CONFIG);
  const text = await readFile(file, 'utf8').catch(() => {
    throw new UserError(`${dataDir} holds no controller (no ${CONFIG}); give the controller's --data-dir`);
  });
  return parseConfig(parse(text), file);
}

function isSqlite(cfg: ClusterConfig): boolean {
  return cfg.spec.storage.type === 'kine' && (cfg.spec.storage.kine.dataSource ?? 'sqlite://').startsWith('sqlite://');
}

/** Where archives go when no --save-path is given: spec.backup.path, default <data-dir>/backups. */
export function defaultBackupPath(cfg: ClusterConfig, dataDir: string): string {
  return cfg.spec.backup.path ?? join(dataDir, 'backups');
}

export interface BackupOptions {
  dataDir: string;
  runDir: string;
  savePath: string;
  log: Logger;
  /** Seal the archive with this key (kctl-backup-<time>.tar.gz.enc). */
  key?: Buffer;
}

/** Writes <savePath>/kctl-backup-<time>.tar.gz[.enc] (0600, complete or not at all); returns its path. */
export async function backupController(o: BackupOptions): Promise<string> {
  const cfg = await effectiveConfig(o.dataDir);
  const paths = controllerPaths(o.dataDir, o.runDir);
  const type = cfg.spec.storage.type;
  const owner = await liveOwner(o.dataDir);
  if (type === 'etcd' && owner?.role !== 'controller')
    throw new UserError(
      `no controller is running on ${o.dataDir}; an etcd snapshot needs the running etcd: start it, then back up`,
    );
  const save = await stat(o.savePath).catch(() => undefined);
  if (!save?.isDirectory()) throw new UserError(`--save-path ${o.savePath} is not a directory`);
  const staging = await mkdtemp(join(o.savePath, '.kctl-backup-')).catch((err: NodeJS.ErrnoException) => {
    throw new UserError(`cannot write into --save-path ${o.savePath} (${err.code ?? err.message})`);
  });
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const target = join(o.savePath, `kctl-backup-${stamp}.tar.gz${o.key ? '.enc' : ''}`);
  const partial = `${target}.partial`;
  try {
    await chmod(staging, 0o700);
    await cp(paths.pkiDir, join(staging, 'pki'), { recursive: true });
    await cp(join(o.dataDir, CONFIG), join(staging, CONFIG));
    let storage: BackupManifest['storage'];
    if (type === 'etcd') {
      const pki = pkiPaths(paths.pkiDir);
      const r = await execa(
        join(paths.binDir, 'etcdctl'),
        [
          `--endpoints=${etcdClientUrl(cfg.spec.storage.etcd.clientPort)}`,
          `--cacert=${pki.etcdCaCert}`,
          `--cert=${pki.apiserverEtcdClientCert}`,
          `--key=${pki.apiserverEtcdClientKey}`,
          'snapshot',
          'save',
          join(staging, ETCD_SNAPSHOT),
        ],
        { reject: false },
      );
      if (r.exitCode !== 0) throw new UserError(`etcd snapshot failed: ${String(r.stderr).trim().split('\n').pop()}`);
      storage = { type, datastore: 'etcd-snapshot' };
    } else if (isSqlite(cfg)) {
      const db = new DatabaseSync(join(paths.kineDbDir, 'state.db'));
      try {
        await sqliteBackup(db, join(staging, SQLITE_COPY));
      } finally {
        db.close();
      }
      storage = { type, datastore: 'sqlite' };
    } else {
      storage = {
        type,
        datastore: 'external',
        note: 'kine on an external database: back that database up with its own tools; this archive holds the rest',
      };
      o.log.warn({}, storage.note!);
    }
    const members = [];
    for (const f of (await filesUnder(staging)).sort()) {
      members.push({ path: relative(staging, f), sha256: (await sha256OfFile(f))!, size: (await stat(f)).size });
    }
    const manifest: BackupManifest = {
      kctlVersion: KCTL_VERSION,
      createdAt: new Date().toISOString(),
      storage,
      members,
    };
    await writeFile(join(staging, MANIFEST), JSON.stringify(manifest, null, 2) + '\n', { mode: 0o600 });
    // Created 0600 before a byte of key material goes in; renamed into place only when complete.
    await (await open(partial, 'wx', 0o600)).close();
    const files = [MANIFEST, ...members.map((m) => m.path)];
    if (o.key) {
      const plain = join(staging, 'archive.tar.gz');
      await tar.create({ gzip: true, file: plain, cwd: staging, portable: true }, files);
      await pipeline(createReadStream(plain), cipherStream(new Sealer(o.key)), createWriteStream(partial));
    } else {
      await tar.create({ gzip: true, file: partial, cwd: staging, portable: true }, files);
    }
    await rename(partial, target);
    return target;
  } finally {
    await removeQuietly(staging);
    await removeQuietly(partial);
  }
}

/** Unpacks and checks an archive into `dir`; one clear line when it is damaged or altered. */
async function unpackVerified(archive: string, dir: string, shownAs = archive): Promise<BackupManifest> {
  const bad = (why: string) => new UserError(`${shownAs} is not a usable kctl backup: ${why}; nothing was restored`);
  try {
    await tar.extract({ file: archive, cwd: dir, strict: true });
  } catch (err) {
    throw bad(`it does not unpack (${reasonOf(err)}); it may be truncated or corrupt`);
  }
  let manifest: BackupManifest;
  try {
    manifest = JSON.parse(await readFile(join(dir, MANIFEST), 'utf8')) as BackupManifest;
  } catch {
    throw bad(`${MANIFEST} is missing or unreadable`);
  }
  if (!Array.isArray(manifest.members) || !manifest.storage) throw bad(`${MANIFEST} is not a kctl manifest`);
  const listed = new Set(manifest.members.map((m) => m.path));
  for (const f of await filesUnder(dir)) {
    const rel = relative(dir, f);
    if (rel !== MANIFEST && !listed.has(rel)) throw bad(`${rel} is not in the manifest`);
  }
  for (const m of manifest.members) {
    const sum = await sha256OfFile(join(dir, m.path));
    if (sum === null) throw bad(`${m.path} is missing`);
    if (sum !== m.sha256) throw bad(`${m.path} does not match its sha256 (altered or damaged)`);
  }
  return manifest;
}

/** Decrypts `archive` into `plain`, every chunk checked; one line when the key or the archive is wrong. */
async function decryptArchive(archive: string, key: Buffer, plain: string): Promise<void> {
  try {
    await pipeline(createReadStream(archive), cipherStream(new Opener(key)), createWriteStream(plain, { mode: 0o600 }));
  } catch (err) {
    if (!(err instanceof BackupCipherError)) throw err;
    throw new UserError(`${archive} cannot be decrypted: ${err.message}; nothing was restored`);
  }
}

/** Restores an archive into an empty (or absent) data dir; refuses before writing there otherwise. */
export async function restoreController(o: {
  archive: string;
  dataDir: string;
  log: Logger;
  keyFile?: string;
}): Promise<BackupManifest> {
  if (!existsSync(o.archive)) throw new UserError(`${o.archive} does not exist`);
  const encrypted = await isEncryptedArchive(o.archive);
  if (encrypted && !o.keyFile)
    throw new UserError(
      `${o.archive} is encrypted; give its key with --encryption-key-file FILE; nothing was restored`,
    );
  const key = encrypted && o.keyFile ? await readBackupKey(o.keyFile) : undefined;
  const entries = await readdir(o.dataDir).catch(() => undefined);
  if (entries && entries.length > 0)
    throw new UserError(`${o.dataDir} is not empty; restore goes into an empty data dir only (kctl reset empties it)`);
  const parent = dirname(o.dataDir);
  await mkdir(parent, { recursive: true, mode: 0o755 });
  const staging = await mkdtemp(join(parent, '.kctl-restore-'));
  try {
    await chmod(staging, 0o700);
    const unpacked = join(staging, 'archive');
    await mkdir(unpacked, { mode: 0o700 });
    let tarball = o.archive;
    if (key) {
      tarball = join(staging, 'archive.tar.gz');
      await decryptArchive(o.archive, key, tarball);
    }
    const manifest = await unpackVerified(tarball, unpacked, o.archive);
    const data = join(staging, 'data');
    const paths = controllerPaths(data, '/nonexistent');
    await mkdir(data, { mode: 0o755 });
    await cp(join(unpacked, 'pki'), paths.pkiDir, { recursive: true });
    await cp(join(unpacked, CONFIG), join(data, CONFIG));
    const cfg = await effectiveConfig(data);
    if (manifest.storage.datastore === 'etcd-snapshot') {
      const binDir = await stageOwn(paths.binRoot, ['controller'], o.log);
      const peer = httpsUrl(cfg.spec.api.address, cfg.spec.storage.etcd.peerPort);
      const name = hostname();
      const r = await execa(
        join(binDir, 'etcdutl'),
        [
          'snapshot',
          'restore',
          join(unpacked, ETCD_SNAPSHOT),
          `--data-dir=${paths.etcdDataDir}`,
          `--name=${name}`,
          `--initial-cluster=${name}=${peer}`,
          `--initial-advertise-peer-urls=${peer}`,
        ],
        { reject: false },
      );
      if (r.exitCode !== 0)
        throw new UserError(`etcd snapshot restore failed: ${String(r.stderr).trim().split('\n').pop()}`);
      await chmod(paths.etcdDataDir, 0o700);
    } else if (manifest.storage.datastore === 'sqlite') {
      await mkdir(paths.kineDbDir, { recursive: true, mode: 0o700 });
      await cp(join(unpacked, SQLITE_COPY), join(paths.kineDbDir, 'state.db'));
    } else {
      o.log.warn(
        {},
        'the archive holds no datastore (kine on an external database): the controller uses that database as it is now',
      );
    }
    if (entries) await rmdir(o.dataDir);
    await rename(data, o.dataDir);
    return manifest;
  } finally {
    await removeQuietly(staging);
  }
}

/** Cleanup that never hides the error being reported (a failed unpack may still be writing). */
async function removeQuietly(path: string): Promise<void> {
  await rm(path, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 }).catch(() => undefined);
}
