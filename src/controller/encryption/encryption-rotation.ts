// `kctl secrets rotate-key`: moves every controller to a new encryption key in the order that is
// safe with several kube-apiservers, waiting for all live controllers to load each step:
//   1. the new key decrypts (second) everywhere  2. it encrypts (first) everywhere
//   3. every encrypted object is rewritten with it  4. the old key is dropped everywhere.
// The step is kept in the key set itself (encryption-keys.ts), so an interrupted rotation resumes
// where it stopped when the command runs again.
import { readFile } from 'node:fs/promises';
import { UserError } from '../../base/errors.ts';
import { pollWithin } from '../../base/wait.ts';
import type { KubeClient } from '../../kube/client.ts';
import { CONTROLLER_LEASE_LABEL, LEASES_PATH, liveControllers, type Lease } from '../../kube/controller-leases.ts';
import { rewriteResource } from '../../kube/rewrite.ts';
import { encryptionConfigHash, newEncryptionKey, parseEncryptionKeys } from '../../pki/index.ts';
import {
  addKey,
  dropOldKeys,
  KEYS_NAMESPACE,
  KEYS_SECRET,
  keyNames,
  loadedConfigHash,
  promoteKey,
  readTrustedKeySet,
  rotationStep,
  updateKeySet,
  type KeySetTrust,
} from './encryption-keys.ts';

export interface RotateOptions {
  kube: KubeClient;
  /** This controller's encryption config: what an api-only control plane (no leases) is checked against. */
  localConfig: string;
  /** spec.api.encryption.resources of this controller. */
  resources: string[];
  /** This host's CA key and trusted CAs: the set is believed only when signed, and signed when written. */
  trust: KeySetTrust;
  /** How long each step may wait for the controllers. */
  timeoutMs: number;
  progress: (line: string) => void;
}

export interface RotateResult {
  key: string;
  rewritten: Record<string, number>;
  controllers: string[];
}

/** Which controllers have not loaded `names` yet (every live one by its Lease; without leases this one). */
async function lagging(o: RotateOptions, names: string): Promise<{ all: string[]; behind: string[] }> {
  const leases = await o.kube.list<Lease>(LEASES_PATH, { labelSelector: `${CONTROLLER_LEASE_LABEL}=true` });
  const live = liveControllers(leases.items);
  if (live.length > 0)
    return { all: live.map((c) => c.name), behind: live.filter((c) => c.encryptionKeys !== names).map((c) => c.name) };
  // An api-only control plane runs alone and holds no lease: its own file and kube-apiserver tell.
  const text = await readFile(o.localConfig);
  const done =
    keyNames(parseEncryptionKeys(text.toString('utf8'))) === names &&
    (await loadedConfigHash(o.kube)) === encryptionConfigHash(text);
  return { all: ['this controller'], behind: done ? [] : ['this controller'] };
}

async function waitLoaded(o: RotateOptions, names: string, what: string): Promise<string[]> {
  let said = '';
  let now = { all: [] as string[], behind: [] as string[] };
  await pollWithin(
    o.timeoutMs,
    2_000,
    async () => {
      now = await lagging(o, names);
      if (now.behind.length === 0) return true;
      const line = `${what}: waiting for ${now.behind.join(', ')} (${now.all.length - now.behind.length}/${now.all.length} done; kube-apiserver reloads within a minute)`;
      if (line !== said) o.progress(line);
      said = line;
      return false;
    },
    () =>
      new UserError(
        `${now.behind.join(', ')} did not load the encryption keys ${names} in time; check them with kctl status (a controller of an older kctl never does), then run kctl secrets rotate-key again to resume`,
      ),
  );
  o.progress(`${what}: loaded by ${now.all.join(', ')}`);
  return now.all;
}

export async function rotateKey(o: RotateOptions): Promise<RotateResult> {
  let set = await readTrustedKeySet(o.kube, o.trust);
  if (!set)
    throw new UserError(
      `the cluster has no encryption key set yet (Secret ${KEYS_NAMESPACE}/${KEYS_SECRET}); start this kctl's controller and wait until it is ready`,
    );
  const names = keyNames(set.keys);
  // Every controller has the current set before anything moves: a step must not strand one.
  await waitLoaded(o, names, `current keys ${names}`);
  if (rotationStep(set) === 'add') {
    const key = newEncryptionKey();
    set = await updateKeySet(o.kube, o.trust, (s) => addKey(s, key));
    o.progress(`added ${key.name} as a decryption key`);
    await waitLoaded(o, keyNames(set.keys), `keys ${keyNames(set.keys)}`);
  } else o.progress(`resuming the rotation to ${set.rotatingTo}`);
  if (rotationStep(set) === 'promote') {
    set = await updateKeySet(o.kube, o.trust, promoteKey);
    o.progress(`${set.rotatingTo} now encrypts`);
    await waitLoaded(o, keyNames(set.keys), `keys ${keyNames(set.keys)}`);
  }
  const rewritten: Record<string, number> = {};
  for (const resource of new Set([...(set.encryptedResources ?? []), ...o.resources])) {
    rewritten[resource] = await rewriteResource(o.kube, resource);
    o.progress(`rewrote ${rewritten[resource]} ${resource} with ${set.rotatingTo}`);
  }
  set = await updateKeySet(o.kube, o.trust, dropOldKeys);
  o.progress(`dropped the old keys; ${set.keys[0]!.name} is the only key`);
  const controllers = await waitLoaded(o, keyNames(set.keys), `keys ${keyNames(set.keys)}`);
  return { key: set.keys[0]!.name, rewritten, controllers };
}
