// The worker profile kubelet runs with (kube/worker-profiles.ts): read from the cluster before
// kubelet first starts (with the join token's credential until the node has its own), kept in the
// data dir so a restart without the controllers runs as before, and followed live after: a changed
// profile rewrites kubelet's configuration and restarts kubelet (its containers keep running).
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Component, ComponentContext, Restartable } from '../base/component.ts';
import { reasonOf, UserError } from '../base/errors.ts';
import { writeFileAtomic } from '../base/fs.ts';
import type { Logger } from '../base/log.ts';
import { KubeApiError, KubeClient } from '../kube/client.ts';
import { Informer, NODE_WATCH } from '../kube/informer.ts';
import {
  DEFAULT_WORKER_PROFILE,
  parseWorkerProfile,
  WORKER_PROFILES_COLLECTION,
  WORKER_PROFILES_NAME,
  WORKER_PROFILES_PATH,
  type KubeletValues,
} from '../kube/worker-profiles.ts';
import type { WorkerPaths } from './paths.ts';

export interface KubeletProfileOptions {
  /** --profile; without it the worker follows the profile named `default` when the cluster has one. */
  name?: string;
  paths: WorkerPaths;
  /** The node's own client (usable once kubelet holds its certificate). */
  kube: KubeClient;
  /** kubelet: its configuration rewritten from profile(), then restarted. */
  kubelet: Restartable & { writeConfig(): Promise<void> };
  /** How long a restarted worker waits for the cluster before it runs the profile it saved. */
  savedAfterMs?: number;
  /** How long kubelet has to be ready with a changed profile before the previous one is restored. */
  readyAfterChangeMs?: number;
}

/** What `kctl status` shows of it. */
export interface KubeletProfileStatus {
  /** The profile followed: --profile, or `default`. */
  name: string;
  /** Whether the cluster defines it (a worker without --profile and no `default` runs kctl's settings). */
  defined: boolean;
  /** The kubelet fields it sets. */
  fields: string[];
  /** Why the last change could not be applied (kubelet keeps what it runs). */
  problem?: string;
}

interface Saved {
  name: string;
  values?: KubeletValues;
}

type ConfigMap = { metadata: { name: string }; data?: Record<string, string> };

export class KubeletProfileComponent implements Component {
  readonly name = 'kubelet-profile';
  private log!: Logger;
  private current?: Saved;
  private problem?: string;
  private informer?: Informer<ConfigMap>;
  /** The last fields kubelet did not start with (JSON), not tried again until the profile changes. */
  private refused?: string;
  /** Aborted by stop(): a start still waiting for the cluster gives up. */
  private readonly stopping = new AbortController();

  constructor(private readonly opts: KubeletProfileOptions) {}

  private get wanted(): string {
    return this.opts.name ?? DEFAULT_WORKER_PROFILE;
  }

  /** The fields kubelet's configuration is written with. */
  values(): KubeletValues | undefined {
    return this.current?.values;
  }

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    const saved = await this.readSaved();
    const { paths } = this.opts;
    // Before kubelet's TLS bootstrap the node has only the join token; a leaked token reads kubelet settings, nothing more.
    const client = existsSync(paths.kubeletKubeconfig)
      ? this.opts.kube
      : KubeClient.fromKubeconfig(paths.bootstrapKubeconfig);
    const deadline = saved ? Date.now() + (this.opts.savedAfterMs ?? 15_000) : Infinity;
    for (let attempt = 0; ; attempt++) {
      try {
        const cm = await client.find<ConfigMap>(WORKER_PROFILES_PATH, this.stopping.signal).catch((err: unknown) => {
          // Controllers from before profiles grant no one this object: as if it did not exist.
          if (err instanceof KubeApiError && err.status === 403) return undefined;
          throw err;
        });
        this.current = this.resolve(cm);
        break;
      } catch (err) {
        if (err instanceof UserError) throw err;
        if (Date.now() >= deadline) {
          this.current = saved;
          this.problem = `the cluster could not be read (${reasonOf(err)}); running the profile saved at the last start`;
          this.log.warn(this.problem);
          break;
        }
        if (attempt % 10 === 0) this.log.info(`reading worker profile ${this.wanted}: ${reasonOf(err)}; retrying`);
        await sleep(1000, undefined, { signal: this.stopping.signal }).catch(() => undefined);
        if (this.stopping.signal.aborted)
          throw new Error('stopped before the worker profile could be read', { cause: err });
      }
    }
    await this.save();
    this.log.info({ profile: this.wanted, fields: Object.keys(this.current?.values ?? {}) }, 'kubelet profile');
    this.informer = new Informer<ConfigMap>(
      this.opts.kube,
      WORKER_PROFILES_COLLECTION,
      { ...NODE_WATCH, fieldSelector: `metadata.name=${WORKER_PROFILES_NAME}` },
      () => this.follow(),
      // Until kubelet holds its certificate, and while the controllers are away: kubelet keeps its settings.
      () => undefined,
    );
    this.informer.start();
  }

  async stop(): Promise<void> {
    this.stopping.abort();
    await this.informer?.stop();
  }

  status(): { lastError?: string } {
    return this.problem ? { lastError: this.problem } : {};
  }

  snapshot(): KubeletProfileStatus {
    return {
      name: this.wanted,
      defined: this.current?.values !== undefined,
      fields: Object.keys(this.current?.values ?? {}).sort(),
      ...(this.problem ? { problem: this.problem } : {}),
    };
  }

  /** The profile from the ConfigMap (undefined: none); a named one the cluster lacks is a user error at start. */
  private resolve(cm: ConfigMap | undefined): Saved {
    const name = this.wanted;
    let values: KubeletValues | undefined;
    try {
      values = parseWorkerProfile(cm?.data, name);
    } catch (err) {
      // A field this node's kubelet does not know (controllers at a newer Kubernetes) among them.
      throw new UserError(`${reasonOf(err)}; fix the profile in the controllers' config`);
    }
    if (values === undefined && this.opts.name !== undefined) {
      const known = Object.keys(cm?.data ?? {}).sort();
      throw new UserError(
        cm
          ? `worker profile ${name} is not in the cluster's spec.workerProfiles (it has ${known.length ? known.join(', ') : 'none'}); add it to the controllers' config or pick another --profile`
          : `the cluster publishes no worker profiles (its controllers run a kctl from before profiles); upgrade them or start without --profile`,
      );
    }
    return { name, ...(values ? { values } : {}) };
  }

  /** A change of the ConfigMap: kubelet restarts onto a changed profile; a broken or removed one keeps what runs. */
  private async follow(): Promise<void> {
    const cm = this.informer?.store.values().next().value;
    if (!this.informer?.hasSynced) return;
    let next: Saved;
    try {
      next = this.resolve(cm);
    } catch (err) {
      const problem = `${reasonOf(err)}; kubelet keeps the settings it runs`;
      if (problem !== this.problem) this.log.warn(problem);
      this.problem = problem;
      return;
    }
    const wanted = JSON.stringify(next.values);
    if (wanted === JSON.stringify(this.current?.values)) return void (this.problem = undefined);
    if (wanted === this.refused) return; // kubelet refused these settings already; its problem stays
    const previous = this.current;
    this.log.info(
      { profile: next.name, fields: Object.keys(next.values ?? {}) },
      'worker profile changed: restarting kubelet with it',
    );
    const reason = await this.run(next, `worker profile ${next.name} changed`);
    if (reason === undefined) {
      this.problem = this.refused = undefined;
      return;
    }
    // kubelet checks more than the shape (a locked feature gate, a range): back to what ran.
    this.refused = wanted;
    this.problem = `kubelet did not start with worker profile ${next.name} (${reason}); it runs the profile's previous settings`;
    this.log.warn(this.problem);
    const still = await this.run(previous ?? { name: next.name }, 'back to the previous worker profile');
    if (still === undefined) return;
    this.problem += `; kubelet is not ready with those either (${still})`;
    this.log.warn(this.problem);
  }

  /** kubelet restarted with `profile` (saved first): undefined once it is ready, else why not. */
  private async run(profile: Saved, why: string): Promise<string | undefined> {
    this.current = profile;
    try {
      await this.save();
      await this.opts.kubelet.writeConfig();
      await this.opts.kubelet.restart(why);
      await this.opts.kubelet.ready(AbortSignal.timeout(this.opts.readyAfterChangeMs ?? 90_000));
      return undefined;
    } catch (err) {
      return reasonOf(err);
    }
  }

  private async readSaved(): Promise<Saved | undefined> {
    try {
      const s = JSON.parse(await readFile(this.opts.paths.kubeletProfile, 'utf8')) as Saved;
      // Started with another --profile than last time: the saved one is not it.
      return s.name === this.wanted ? s : undefined;
    } catch {
      return undefined;
    }
  }

  private save(): Promise<void> {
    return writeFileAtomic(this.opts.paths.kubeletProfile, JSON.stringify(this.current) + '\n', 0o600);
  }
}
