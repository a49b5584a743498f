// A node's part in upgrades. It names the release it runs on its own Node object
// (kctl.dev/version), and follows the upgrade plan (kube/upgrade-plan.ts), which nodes may read.
// When a controller names this node in the plan's `admitted` (controller/upgrades/upgrade-nodes.ts: every
// controller runs the target, the node's drain is over), the node downloads the target from the
// live controllers over its own outbound connection, with its kubelet client certificate and
// resuming after a cut (payload/download.ts), checks the file is the plan's and describes itself
// as the target, keeps its own executable for a rollback, and asks the role to restart into the
// new one. Back at the target and Ready, it reports done. Every report goes on the node's own
// Node object, with the node's own credentials: a hostile node can lie about itself only.
import { mkdir, readFile, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Component, ComponentContext, ComponentStatus } from '../base/component.ts';
import { messageOf } from '../base/errors.ts';
import { kctlExecutable } from '../base/executable.ts';
import type { Logger } from '../base/log.ts';
import type { Release } from '../base/version.ts';
import type { KubeClient } from '../kube/client.ts';
import type { LiveController } from '../kube/controller-leases.ts';
import { isNodeReady, nodePath, type NodeConditions } from '../kube/nodes.ts';
import {
  readUpgradePlan,
  releaseString,
  UPGRADE_ANNOTATION,
  VERSION_ANNOTATION,
  type MemberUpgrade,
  type UpgradePlan,
} from '../kube/upgrade-plan.ts';
import { skewProblem } from '../kube/version-skew.ts';
import { downloadExecutable } from '../payload/download.ts';
import {
  describedProblem,
  executableSource,
  keepForRollback,
  keptExecutable,
  readOutcome,
  releaseOfExecutable,
} from '../payload/upgrade-files.ts';
import { upgradeDone } from '../payload/versions.ts';
import type { RestartRequest } from '../supervisor/handover.ts';
import type { ControllerFollower } from './controller-watch.ts';

const CHECK_EVERY_MS = 5_000;

/** The release is named again this often (an annotation someone removed comes back). */
const RENAME_EVERY_MS = 60_000;
/** While downloading, the bytes so far are reported at most this often. */
const PROGRESS_EVERY_MS = 10_000;

export interface NodeUpgradeOptions {
  kube: KubeClient;
  nodeName: string;
  release: Release;
  dataDir: string;
  /** The staged versions of the components: the previous one goes once the plan is done. */
  binRoot: string;
  /** The cluster CA, and the node's client certificate and key (kubelet-client-current.pem: both in one file). */
  caCert: string;
  clientPem: string;
  restart: RestartRequest;
}

export class NodeUpgradeComponent implements Component, ControllerFollower {
  readonly name = 'node-upgrade';
  private log!: Logger;
  private timer: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  private readonly abort = new AbortController();
  private live: LiveController[] = [];
  private state: MemberUpgrade | undefined;
  private reported = '';
  private reportedAt = 0;
  private lastError: string | undefined;

  constructor(private readonly o: NodeUpgradeOptions) {}

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
  }

  controllersChanged(live: LiveController[]): void {
    this.live = live;
  }

  async start(): Promise<void> {
    const tick = () => {
      this.ticking ??= this.tick()
        .catch((err: unknown) => {
          if (!this.abort.signal.aborted) this.lastError = messageOf(err);
        })
        .finally(() => (this.ticking = undefined));
    };
    tick();
    this.timer = setInterval(tick, CHECK_EVERY_MS);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.abort.abort();
    await this.ticking;
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.lastError };
  }

  private set(target: string, state: MemberUpgrade['state'], extra: Partial<MemberUpgrade> = {}): void {
    if (this.state?.target !== target || this.state.state !== state || extra.reason !== this.state.reason)
      this.log.info(
        { target, state, ...extra },
        `upgrade to ${target}: ${state}${extra.reason ? `: ${extra.reason}` : ''}`,
      );
    this.state = { target, state, at: new Date().toISOString(), ...extra };
  }

  /** Names the release and the upgrade state on the Node, when either changed or a while has passed. */
  private async report(force = false): Promise<void> {
    const annotations = {
      [VERSION_ANNOTATION]: releaseString(this.o.release),
      ...(this.state ? { [UPGRADE_ANNOTATION]: JSON.stringify(this.state) } : {}),
    };
    const text = JSON.stringify({
      ...annotations,
      [UPGRADE_ANNOTATION]: this.state && { ...this.state, at: undefined },
    });
    if (!force && text === this.reported && Date.now() - this.reportedAt < RENAME_EVERY_MS) return;
    await this.o.kube.request('PATCH', nodePath(this.o.nodeName), { metadata: { annotations } });
    if (!this.reported)
      this.log.info({ release: annotations[VERSION_ANNOTATION] }, 'the node names the kctl release it runs');
    this.reported = text;
    this.reportedAt = Date.now();
  }

  private async nodeReady(): Promise<boolean> {
    return isNodeReady(await this.o.kube.get<NodeConditions>(nodePath(this.o.nodeName)));
  }

  private async tick(): Promise<void> {
    const plan = await readUpgradePlan(this.o.kube, this.abort.signal).catch((err: unknown) => {
      // The Node object comes only once kubelet registered it; the plan may be unreadable before that.
      this.lastError = `cannot read the upgrade plan: ${messageOf(err)}`;
      return undefined;
    });
    if (plan !== undefined) {
      this.lastError = undefined;
      if (plan) await this.follow(plan);
    }
    await this.report().catch(
      (err: unknown) => (this.lastError = `cannot report on node ${this.o.nodeName}: ${messageOf(err)}`),
    );
  }

  private async follow(plan: UpgradePlan): Promise<void> {
    const target = plan.target.version;
    const outcome = await readOutcome(this.o.dataDir);
    if (outcome?.target === target) this.set(target, outcome.state, { reason: outcome.reason });
    if (this.o.release.version === target) {
      if (this.state?.state !== 'done' && (await this.nodeReady())) this.set(target, 'done');
      if (plan.state === 'done') await upgradeDone(this.o.binRoot, this.log);
      return;
    }
    if (plan.state !== 'active' || outcome?.target === target) return;
    if (!(this.o.nodeName in plan.admitted)) {
      if (this.state?.target !== target) this.set(target, 'waiting');
      return;
    }
    await this.takeTurn(plan);
  }

  /** This node's turn: fetch, check, keep the previous executable, restart into the new one. */
  private async takeTurn(plan: UpgradePlan): Promise<void> {
    const t = plan.target;
    const installed = kctlExecutable();
    if (!installed) {
      this.set(t.version, 'failed', { reason: 'this node does not run from a kctl executable and cannot swap it' });
      return;
    }
    const file = keptExecutable(this.o.dataDir, t.version);
    await mkdir(dirname(file), { recursive: true, mode: 0o755 });
    this.set(t.version, 'downloading', { bytes: 0 });
    await this.report(true);
    let lastProgress = Date.now();
    const got = await downloadExecutable({
      // Through each controller's front door when it has one (by the join endpoint's name), else its join port.
      sources: () => this.live.flatMap((c) => executableSource(c, t.version) ?? []),
      target: file,
      sha256: t.sha256,
      size: t.size,
      tls: async () => {
        const pem = await readFile(this.o.clientPem);
        return { ca: await readFile(this.o.caCert), cert: pem, key: pem };
      },
      progress: (bytes) => {
        this.state = { ...this.state!, bytes };
        if (Date.now() - lastProgress < PROGRESS_EVERY_MS) return;
        lastProgress = Date.now();
        this.set(t.version, 'downloading', { bytes });
        void this.report(true).catch(() => undefined);
      },
      onError: (url, reason) => this.log.warn({ url, reason }, 'kctl download failed; going on from where it stopped'),
      signal: this.abort.signal,
      // A thin link that brings nothing for this long is cut off: the download goes on after it.
      stallMs: 20_000,
      rounds: 1_000,
    });
    this.log.info({ target: t.version, size: t.size, ...got }, `kctl ${t.version} downloaded and checked (sha256)`);
    const problem =
      describedProblem(await releaseOfExecutable(file), t) ??
      skewProblem([{ name: this.o.nodeName, ...this.o.release }], t);
    if (problem) {
      this.set(t.version, 'failed', { reason: problem });
      await rm(file, { force: true });
      return;
    }
    // The turn may have been given to another node meanwhile (this one was cut off): wait for the next.
    const now = await readUpgradePlan(this.o.kube, this.abort.signal);
    if (now?.state !== 'active' || now.target.version !== t.version || !(this.o.nodeName in now.admitted)) return;
    const previous = await keepForRollback(this.o.dataDir, installed, this.o.release.version);
    this.set(t.version, 'restarting');
    await this.report(true);
    this.o.restart.request(
      { installed, next: file, previous, target: t.version, timeoutMs: plan.readyTimeoutS * 1000 },
      `upgrading to kctl ${t.version}`,
    );
  }
}
