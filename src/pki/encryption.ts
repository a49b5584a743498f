// Encryption at rest: kube-apiserver's EncryptionConfiguration under <data-dir>/pki (0600), with
// kctl's keys in it. The first key is created once, at init, like the CA keys; later keys come
// from `kctl secrets rotate-key` through the cluster (controller/encryption/encryption.ts). The file is the
// one place a controller keeps its keys: a joining controller receives it, a backup carries it.
//
// Provider: secretbox (XSalsa20-Poly1305, 32-byte keys): authenticated, no nonce-reuse limit per
// key as with aesgcm, no padding oracle as with aescbc; kube-apiserver ships it without a plug-in.
import { createHash, randomBytes } from 'node:crypto';
import { parse, stringify } from 'yaml';
import type { Logger } from '../base/log.ts';
import { messageOf } from '../base/errors.ts';
import { enforceMode, KEY_MODE, readIfExists, writeFileAtomic, type Outcome } from './files.ts';
import { PkiError } from './errors.ts';

export interface EncryptionKey {
  /** Appears in every object it encrypts: k8s:enc:secretbox:v1:<name>:… */
  name: string;
  /** 32 random bytes, base64. */
  secret: string;
}

const KEY_NAME = /^key-[0-9A-Za-z-]+$/;

/** A fresh key, named after the moment it was made and a random tag, so two hosts never make one name (key-20260101T120000Z-1a2b3c). */
export function newEncryptionKey(now = new Date()): EncryptionKey {
  const stamp = now
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d+Z$/, 'Z');
  return { name: `key-${stamp}-${randomBytes(3).toString('hex')}`, secret: randomBytes(32).toString('base64') };
}

/**
 * The EncryptionConfiguration: the configured resources are written with the first key and read
 * with any key (or in plain text, for objects written before); every other resource is written in
 * plain text and still read with any key, so an object that an earlier list encrypted stays readable.
 */
export function renderEncryptionConfig(keys: EncryptionKey[], resources: string[]): string {
  if (keys.length === 0) throw new Error('an encryption config needs at least one key');
  const secretbox = { secretbox: { keys: keys.map((k) => ({ name: k.name, secret: k.secret })) } };
  const entries = [
    ...(resources.length ? [{ resources, providers: [secretbox, { identity: {} }] }] : []),
    { resources: ['*.*'], providers: [{ identity: {} }, secretbox] },
  ];
  return (
    '# Written by kctl: its keys encrypt Secrets at rest. Keep this file with the datastore (kctl backup does).\n' +
    stringify({ apiVersion: 'apiserver.config.k8s.io/v1', kind: 'EncryptionConfiguration', resources: entries })
  );
}

interface ConfigFile {
  resources?: {
    resources?: string[];
    providers?: { secretbox?: { keys?: { name?: unknown; secret?: unknown }[] } }[];
  }[];
}

/** The keys of a file kctl wrote, in order (the first encrypts); throws with what is wrong. */
export function parseEncryptionKeys(text: string): EncryptionKey[] {
  const doc = parse(text) as ConfigFile | null;
  const all = doc?.resources?.find((r) => r.resources?.includes('*.*'));
  const keys = all?.providers?.find((p) => p.secretbox)?.secretbox?.keys;
  if (!keys?.length) throw new Error('it has no secretbox keys for *.*');
  return keys.map((k, i) => {
    if (typeof k.name !== 'string' || !KEY_NAME.test(k.name)) throw new Error(`key ${i + 1} has no valid name`);
    if (typeof k.secret !== 'string' || Buffer.from(k.secret, 'base64').length !== 32)
      throw new Error(`key ${k.name} is not 32 bytes of base64`);
    return { name: k.name, secret: k.secret };
  });
}

/** What kube-apiserver reports for a loaded file (its metric apiserver_encryption_config_controller_last_config_info{hash}). */
export function encryptionConfigHash(text: string | Buffer): string {
  return `sha256:${createHash('sha256').update(text).digest('hex')}`;
}

/** The keys in the file, or an error line naming the file and what to do. */
export async function readEncryptionKeys(path: string): Promise<EncryptionKey[] | null> {
  const text = await readIfExists(path);
  if (text === null) return null;
  try {
    return parseEncryptionKeys(text);
  } catch (err) {
    throw new PkiError(
      `${path} is not a usable encryption config (${messageOf(err)}); restore it from a backup or another controller`,
    );
  }
}

/** Writes the file for `keys` and `resources` when its content differs; true when it did. */
export async function writeEncryptionConfig(
  path: string,
  keys: EncryptionKey[],
  resources: string[],
): Promise<boolean> {
  const text = renderEncryptionConfig(keys, resources);
  if ((await readIfExists(path)) === text) return false;
  await writeFileAtomic(path, text, KEY_MODE);
  return true;
}

/** At init: the first key, once; on every start: the file rendered for the configured resources, its keys kept. */
export async function ensureEncryptionConfig(path: string, resources: string[], log: Logger): Promise<Outcome> {
  const keys = await readEncryptionKeys(path);
  if (!keys) {
    const key = newEncryptionKey();
    await writeEncryptionConfig(path, [key], resources);
    log.info({ file: path, key: key.name, resources }, 'encryption key created');
    return 'created';
  }
  await enforceMode(path, KEY_MODE, log);
  if (await writeEncryptionConfig(path, keys, resources)) {
    log.info({ file: path, resources }, 'encryption config rewritten for spec.api.encryption.resources');
    return 'renewed';
  }
  return 'unchanged';
}
