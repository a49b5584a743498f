// pki-renewer: renews the controller's leaf certificates and component kubeconfigs while it runs,
// at the time the renewal rule gives (src/pki/leaf.ts renewalTime: two thirds into the lifetime,
// or 30 days before expiry when earlier), by running the same ensure step as the start under the
// same lock. Then each renewed file reaches what uses it, one at a time:
//   reread by the program itself: kube-apiserver (serving and front-proxy certs on change, the
//     kubelet and etcd client certs on new connections), etcd (every handshake), kctl's API client
//     (admin.conf on every request);
//   reloaded in process: the konnectivity agent port and the join endpoint (new TLS context for
//     new handshakes, open connections stay);
//   rewritten: the metrics-server stack (its Secret; metrics-server rereads the mounted files);
//   restarted through the supervisor: kube-scheduler and kube-controller-manager, which keep an
//     embedded kubeconfig client certificate for their life (both leader-elected: nothing that
//     serves requests stops).
import { readFile } from 'node:fs/promises';
import type { Component, ComponentContext, ComponentStatus, Restartable } from '../../base/component.ts';
import { messageOf } from '../../base/errors.ts';
import type { Logger } from '../../base/log.ts';
import {
  CertificateWatch,
  controllerCertificates,
  ensurePkiFiles,
  type CertificateStatus,
  type PkiOptions,
  type PkiPaths,
} from '../../pki/index.ts';
import type { ClusterConfig } from '../config/config.ts';
import { leafValidityMs } from '../config/config.ts';
import { frontDoorNames } from '../config/front-door.ts';
import type { ControllerPaths } from '../config/paths.ts';
import { localApiHost } from '../config/urls.ts';
import { CaRotationFollower, FOLLOW_EVERY_MS } from './ca-rotation.ts';
import type { KubeClient } from '../../kube/client.ts';

/** Never sleep longer than this: a clock that jumps is noticed within the hour. */
const MAX_SLEEP_MS = 3600_000;
/** After a failed renewal. */
const RETRY_MS = 30_000;
/** How long a restarted component has to become ready again. */
const READY_TIMEOUT_MS = 180_000;

/** How many renewal runs status keeps. */
const HISTORY = 20;

export interface RenewalRun {
  startedAt: string;
  finishedAt: string;
  /** How many certificate files it renewed. */
  files: number;
}

/** What a renewed file must reach; each part optional (an api-only control plane has fewer). */
export interface RenewalTargets {
  konnectivity?: { reloadTls(): Promise<void> };
  joinServer?: { reloadTls(): Promise<void> };
  scheduler?: Restartable;
  controllerManager?: Restartable;
  /** Rewrites the add-on stacks (metrics-server's serving certificate is in its Secret). */
  addons?: (log: Logger) => Promise<void>;
  /** Follows a cluster CA rotation (ca-rotation.ts): the API client, and what publishes the new trust bundle to nodes. */
  caRotation?: { kube: KubeClient; publishCa?: (caPem: string) => Promise<void> };
}

/** In HA, whose turn it is: held while one controller renews and restarts, so controllers take turns. */
export interface RenewalTurn {
  acquire(signal: AbortSignal, log: Logger): Promise<() => Promise<void>>;
}

/** The PKI options of a controller, the same at start and for every renewal. */
export function pkiOptions(cfg: ClusterConfig, paths: ControllerPaths): PkiOptions {
  return {
    dir: paths.pkiDir,
    apiAddress: cfg.spec.api.address,
    // The front door passes TLS through: each server proves the name its clients asked for.
    sans: [...cfg.spec.api.sans, ...Object.values(frontDoorNames(cfg) ?? {})],
    apiPort: cfg.spec.api.port,
    kubeconfigHost: localApiHost(cfg),
    serviceCIDR: cfg.spec.network.serviceCIDR,
    clusterDomain: cfg.spec.network.clusterDomain,
    leafValidityMs: leafValidityMs(cfg),
    apiOnly: cfg.spec.profile === 'api-only' ? { etcd: cfg.spec.storage.type === 'etcd' } : undefined,
  };
}

export class PkiRenewerComponent implements Component {
  readonly name = 'pki-renewer';
  private log!: Logger;
  private readonly watch: CertificateWatch;
  private timer: NodeJS.Timeout | undefined;
  private readonly abort = new AbortController();
  private running: Promise<void> = Promise.resolve();
  private lastError: string | undefined;
  private history: RenewalRun[] = [];
  private readonly follower: CaRotationFollower | undefined;
  private followTimer: NodeJS.Timeout | undefined;
  /** Renewals and CA rotation steps run one after the other. */
  private serial: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly opts: PkiOptions,
    private readonly pki: PkiPaths,
    private readonly targets: RenewalTargets,
    private readonly turn?: RenewalTurn,
  ) {
    this.watch = new CertificateWatch(controllerCertificates(pki));
    const rotation = targets.caRotation;
    if (rotation)
      this.follower = new CaRotationFollower(rotation.kube, pki, (reason, write) => this.rotationStep(reason, write));
  }

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  async start(): Promise<void> {
    await this.watch.check();
    this.schedule();
    if (this.follower) await this.follow();
  }

  async stop(): Promise<void> {
    this.abort.abort();
    clearTimeout(this.timer);
    clearTimeout(this.followTimer);
    await Promise.allSettled([this.running, this.serial]);
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.lastError ?? this.follower?.lastError };
  }

  /** The trust bundle (ca.crt) this controller uses, by bundleHash: named in its lease for `kctl pki rotate-ca`. */
  loadedCaBundle(): string | undefined {
    return this.follower?.loadedBundle();
  }

  private async follow(): Promise<void> {
    if (this.abort.signal.aborted || !this.follower) return;
    const check = () => this.follower!.check(this.log, this.abort.signal);
    this.serial = this.serial.then(check, check);
    await this.serial;
    if (!this.abort.signal.aborted) this.followTimer = setTimeout(() => void this.follow(), FOLLOW_EVERY_MS);
  }

  /**
   * One CA rotation step on this controller, in its renewal turn: the phase's CA files, then every
   * leaf and kubeconfig the new signer or bundle makes stale, to its users as renewals go; the
   * konnectivity port and join endpoint take the new trust, and nodes get it through cluster-info.
   */
  private async rotationStep(reason: string, write: () => Promise<boolean>): Promise<void> {
    const release = await this.turn?.acquire(this.abort.signal, this.log);
    const started = new Date();
    try {
      await write();
      const { changed } = await ensurePkiFiles({ ...this.opts, now: new Date() }, this.log);
      await this.pickUp(changed);
      await this.targets.konnectivity?.reloadTls();
      await this.targets.joinServer?.reloadTls();
      const publish = this.targets.caRotation?.publishCa;
      if (publish) await publish(await readFile(this.pki.caCert, 'utf8'));
      this.record(started, changed.length);
      this.log.info({ reason, files: changed.length }, 'CA rotation step reached every component');
    } finally {
      await this.watch.check();
      await release?.();
    }
  }

  private record(started: Date, files: number): void {
    this.history = [
      ...this.history,
      { startedAt: started.toISOString(), finishedAt: new Date().toISOString(), files },
    ].slice(-HISTORY);
  }

  /** The last renewals (when each ran, from the turn taken to the last component picking up): HA turns are seen not to overlap. */
  renewals(): RenewalRun[] {
    return this.history;
  }

  /** Every CA, leaf and kubeconfig certificate of this controller, for `kctl status`. */
  certificates(): CertificateStatus[] {
    return this.watch.report();
  }

  private schedule(delayMs?: number): void {
    if (this.abort.signal.aborted) return;
    const next = this.watch.nextRenewal();
    // A second late: the rule's own comparison then says "due" for sure.
    const wait =
      delayMs ?? (next ? Math.min(MAX_SLEEP_MS, Math.max(1000, next.getTime() - Date.now() + 1000)) : MAX_SLEEP_MS);
    if (next && delayMs === undefined) this.log.debug({ next: next.toISOString() }, 'next certificate renewal');
    this.timer = setTimeout(() => {
      const renew = () => this.renew();
      this.running = this.serial = this.serial.then(renew, renew);
      this.running.then(
        () => this.schedule(),
        (err: unknown) => {
          if (this.abort.signal.aborted) return;
          this.lastError = `renewal failed: ${messageOf(err)}`;
          this.log.error({ retryInMs: RETRY_MS }, this.lastError);
          this.schedule(RETRY_MS);
        },
      );
    }, wait);
  }

  private async renew(): Promise<void> {
    const due = this.watch.nextRenewal();
    if (!due || due.getTime() > Date.now()) {
      await this.watch.check();
      return;
    }
    const release = await this.turn?.acquire(this.abort.signal, this.log);
    const started = new Date();
    try {
      const { changed } = await ensurePkiFiles({ ...this.opts, now: new Date() }, this.log);
      if (changed.length) {
        await this.pickUp(changed);
        this.record(started, changed.length);
      }
      this.lastError = undefined;
    } finally {
      await this.watch.check();
      await release?.();
    }
  }

  /** Each renewed file to what uses it, one component at a time. */
  private async pickUp(changed: string[]): Promise<void> {
    const p = this.pki;
    const has = (file: string) => changed.includes(file);
    const t = this.targets;
    if (has(p.serverCert)) await t.joinServer?.reloadTls();
    if (has(p.konnectivityCert)) await t.konnectivity?.reloadTls();
    if (has(p.metricsServerCert)) await t.addons?.(this.log);
    for (const [file, target] of [
      [p.schedulerConf, t.scheduler],
      [p.controllerManagerConf, t.controllerManager],
    ] as const) {
      if (!target || !has(file) || this.abort.signal.aborted) continue;
      await target.restart('its kubeconfig has a renewed client certificate');
      await target.ready(AbortSignal.any([this.abort.signal, AbortSignal.timeout(READY_TIMEOUT_MS)]));
    }
    this.log.info(
      { files: changed.map((f) => f.slice(p.dir.length + 1)) },
      'renewed certificates reached their components',
    );
  }
}
