// Encryption at rest on a running controller: keeps the local encryption config (pki/encryption.ts)
// equal to the cluster's key set (encryption-keys.ts), says which keys its kube-apiserver has
// loaded (read from the kube-apiserver's metric, published in this controller's Lease), and
// rewrites every object once when the configured resources change (the first start of a cluster
// made before encryption at rest: its Secrets are then encrypted). Starts just before kube-apiserver.
//
// A controller that was down while a rotation dropped the key it has cannot read the key set
// through its own kube-apiserver; it reads it through another live controller's.
//
// It believes the set only when a CA it trusts signed it (encryption-keys.ts): a forged set is
// refused with one warn line and an event on the Secret, and nothing changes. A set signed by a CA
// it still trusts but no longer signs with (a CA rotation) is signed again with its own key; an
// unsigned set (written by an older kctl) only when it holds exactly this controller's keys.
import type { Component, ComponentContext, ComponentStatus } from '../../base/component.ts';
import type { Logger } from '../../base/log.ts';
import { messageOf } from '../../base/errors.ts';
import { credentialsFromKubeconfig, KubeApiError, KubeClient } from '../../kube/client.ts';
import { CONTROLLER_LEASE_LABEL, LEASES_PATH, liveControllers, type Lease } from '../../kube/controller-leases.ts';
import { rewriteResource } from '../../kube/rewrite.ts';
import {
  encryptionConfigHash,
  readEncryptionKeys,
  renderEncryptionConfig,
  writeEncryptionConfig,
  type PkiPaths,
} from '../../pki/index.ts';
import type { ClusterConfig } from '../config/config.ts';
import { warningEvent } from '../../kube/events.ts';
import {
  KEYS_NAMESPACE,
  KEYS_SECRET,
  keyNames,
  KeySetRefused,
  keySetProblem,
  keySetSigner,
  keySetTrust,
  loadedConfigHash,
  readKeySet,
  resourcesToRewrite,
  unknownKeys,
  updateKeySet,
  writeKeySet,
  type KeySet,
  type KeySetTrust,
} from './encryption-keys.ts';

const SYNC_EVERY_MS = 5_000;

/** The key names (in order) this controller's kube-apiserver has loaded, for its Lease. */
export interface LoadedKeys {
  loadedKeys(): string | undefined;
}

export class EncryptionComponent implements Component, LoadedKeys {
  readonly name = 'encryption';
  private log!: Logger;
  private timer: NodeJS.Timeout | undefined;
  private syncing: Promise<void> | undefined;
  private loaded: { hash: string; names: string } | undefined;
  private reached = false;
  private lastError: string | undefined;
  private readonly abort = new AbortController();
  /** The resourceVersion of the last refused set: announced once. */
  private refused: string | undefined;

  constructor(
    private readonly cfg: ClusterConfig,
    private readonly pki: PkiPaths,
    private readonly kube: KubeClient,
  ) {}

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  loadedKeys(): string | undefined {
    return this.loaded?.names;
  }

  /**
   * Starts before kube-apiserver and gates nothing: a kube-apiserver whose keys are older than the
   * cluster's never becomes ready (its informers cannot read Secrets), so this must already be
   * fetching the cluster's keys while it starts. Until it answers, the attempts fail quietly.
   */
  async start(): Promise<void> {
    const tick = () => {
      if (!this.syncing) this.syncing = this.sync().finally(() => (this.syncing = undefined));
    };
    tick();
    this.timer = setInterval(tick, SYNC_EVERY_MS);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.abort.abort();
    await this.syncing;
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.lastError };
  }

  private async sync(): Promise<void> {
    try {
      const trust = await keySetTrust(this.pki);
      let set = await this.keySet(trust);
      const file = this.pki.encryptionConfig;
      const unknown = unknownKeys(set, (await readEncryptionKeys(file)) ?? []);
      if (unknown.length) {
        set = await updateKeySet(this.kube, trust, (s) => ({ ...s, keys: [...s.keys, ...unknownKeys(s, unknown)] }));
        this.log.warn(
          { keys: keyNames(unknown) },
          "offered this controller's own encryption keys to the cluster as decryption keys; kctl secrets rotate-key retires them",
        );
      }
      const resources = this.cfg.spec.api.encryption.resources;
      if (await writeEncryptionConfig(file, set.keys, resources))
        this.log.info(
          { keys: keyNames(set.keys) },
          'encryption config written from the cluster key set; kube-apiserver loads it within a minute',
        );
      // The file now holds exactly this rendering of the key set: no need to read it back.
      const hash = encryptionConfigHash(renderEncryptionConfig(set.keys, resources));
      if (this.loaded?.hash !== hash) {
        if ((await loadedConfigHash(this.kube, this.abort.signal)) !== hash) return;
        this.loaded = { hash, names: keyNames(set.keys) };
        this.log.info({ keys: this.loaded.names }, 'kube-apiserver loaded the encryption keys');
      }
      if (this.loaded.names === keyNames(set.keys)) await this.migrate(set, trust);
      this.lastError = undefined;
      this.reached = true;
    } catch (err) {
      if (this.abort.signal.aborted) return;
      const message = `encryption keys: ${messageOf(err)}`;
      // kube-apiserver is not listening yet while the controller starts: not worth a warning.
      if (message !== this.lastError && (this.reached || err instanceof KubeApiError || err instanceof KeySetRefused))
        this.log.warn(message);
      this.lastError = message;
    }
  }

  /** The cluster's key set as this controller may believe it; published from its file when no controller has yet. */
  private async keySet(trust: KeySetTrust): Promise<KeySet> {
    const set = await this.readSet(trust);
    const signer = keySetSigner(set, trust);
    if (signer === 0) return set;
    if (signer > 0) {
      this.log.info('signed the encryption key set again with the CA this controller signs with now (a CA rotation)');
      return writeKeySet(this.kube, set, trust);
    }
    const local = await readEncryptionKeys(this.pki.encryptionConfig);
    if (
      !set.signature &&
      local &&
      keyNames(local) === keyNames(set.keys) &&
      local.every((k, i) => k.secret === set.keys[i]!.secret)
    ) {
      this.log.info(
        { keys: keyNames(set.keys) },
        'signed the encryption key set an older kctl wrote (it holds exactly the keys this controller has)',
      );
      return writeKeySet(this.kube, set, trust);
    }
    // Said once (sync's warn line, like any error), and one event per version of the Secret.
    const refused = new KeySetRefused(set, keySetProblem(set, trust)!);
    if (this.refused !== set.resourceVersion) {
      this.refused = set.resourceVersion;
      await warningEvent(
        this.kube,
        { kind: 'Secret', namespace: KEYS_NAMESPACE, name: KEYS_SECRET },
        'EncryptionKeysRefused',
        refused.message,
        'kctl-controller',
      ).catch(() => undefined);
    }
    throw refused;
  }

  private async readSet(trust: KeySetTrust): Promise<KeySet> {
    let set: KeySet | null;
    try {
      set = await readKeySet(this.kube);
    } catch (err) {
      // 500 (or a cache not ready yet while it starts): this kube-apiserver may be unable to decrypt
      // the Secret, its keys older than the cluster's.
      if (!(err instanceof KubeApiError && (err.status >= 500 || err.status === 429))) throw err;
      set = await this.keySetFromOthers(err);
    }
    if (set) return set;
    const keys = await readEncryptionKeys(this.pki.encryptionConfig);
    if (!keys) throw new Error(`${this.pki.encryptionConfig} is missing`);
    try {
      const made = await writeKeySet(this.kube, { keys }, trust);
      this.log.info({ keys: keyNames(keys) }, 'published the encryption key set');
      return made;
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 409) return (await readKeySet(this.kube))!;
      throw err;
    }
  }

  private async keySetFromOthers(cause: Error): Promise<KeySet | null> {
    const leases = await this.kube.list<Lease>(LEASES_PATH, { labelSelector: `${CONTROLLER_LEASE_LABEL}=true` });
    const own = credentialsFromKubeconfig(this.pki.adminConf);
    for (const c of liveControllers(leases.items)) {
      if (c.apiServer === own.server) continue;
      try {
        const set = await readKeySet(new KubeClient({ ...own, server: c.apiServer }));
        this.log.info(
          { via: c.name },
          'read the encryption key set through another controller: this one missed a key rotation',
        );
        return set;
      } catch {
        /* the next one */
      }
    }
    throw new Error(`kube-apiserver cannot read the key set (${cause.message}) and no other live controller could`);
  }

  /** Rewrites every object whose storage the configured resources changed, once; repeating it is harmless. */
  private async migrate(set: KeySet, trust: KeySetTrust): Promise<void> {
    const wanted = this.cfg.spec.api.encryption.resources;
    const rewrite = resourcesToRewrite(set.encryptedResources, wanted);
    if (rewrite.length === 0 && set.encryptedResources) return;
    for (const resource of rewrite) {
      const n = await rewriteResource(this.kube, resource, this.abort.signal);
      this.log.info(
        { resource, objects: n, encrypted: wanted.includes(resource) },
        'rewrote every object for the encryption config',
      );
    }
    await updateKeySet(this.kube, trust, (s) => ({ ...s, encryptedResources: [...wanted] }));
  }
}
