// A controller's part in an upgrade plan (kube/upgrade-plan.ts). Every few seconds it reads the
// plan; while it runs an older release than the target it waits for its turn: every other live
// controller ready and not upgrading, and the upgrade lease (kube-system/kctl-upgrade) taken. The
// lease lasts the plan's ready timeout and more, so nobody else starts while this controller is
// away restarting. Then it fetches the target (kept under <data-dir>/upgrade/ by `kctl upgrade
// plan` on this host, or from another controller that has it), checks it describes itself as the
// plan says, keeps its own executable for a rollback, and asks the role to restart into the new
// one (supervisor/handover.ts). Back at the target, it releases the lease once its konnectivity
// server holds the agents again. A rollback's outcome
// (written before the previous executable started again) stops the plan with its reason. Once
// every controller runs the target, one of them takes the lease again and lets the nodes go
// (upgrade-nodes.ts); when every node runs it too, the plan is done.
import { mkdir, readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Component, ComponentContext, ComponentStatus } from '../../base/component.ts';
import { messageOf } from '../../base/errors.ts';
import { kctlExecutable } from '../../base/executable.ts';
import type { Logger } from '../../base/log.ts';
import type { Release } from '../../base/version.ts';
import { credentialsFromKubeconfig, type KubeClient } from '../../kube/client.ts';
import type { LiveController } from '../../kube/controller-leases.ts';
import { LeaderLease } from '../../kube/leader-lease.ts';
import { readUpgradePlan, writeUpgradePlan, type MemberUpgrade, type UpgradePlan } from '../../kube/upgrade-plan.ts';
import { skewProblem } from '../../kube/version-skew.ts';
import { downloadExecutable } from '../../payload/download.ts';
import {
  describedProblem,
  executableSource,
  keepForRollback,
  keptExecutable,
  readOutcome,
  releaseOfExecutable,
} from '../../payload/upgrade-files.ts';
import { upgradeDone } from '../../payload/versions.ts';
import type { PkiPaths } from '../../pki/index.ts';
import type { ControllerPaths } from '../config/paths.ts';
import type { RestartRequest } from '../../supervisor/handover.ts';
import type { ClusterConfig } from '../config/config.ts';
import { NodeUpgrades } from './upgrade-nodes.ts';

export const UPGRADE_LEASE = 'kctl-upgrade';
const CHECK_EVERY_MS = 5_000;
/** The lease outlasts the restart's ready timeout by this much. */
const LEASE_SLACK_S = 120;

export interface ControllerUpgradeOptions {
  cfg: ClusterConfig;
  /** binRoot: the staged versions of the components; the previous one goes once the plan is done. */
  paths: Pick<ControllerPaths, 'dataDir' | 'binRoot'>;
  pki: PkiPaths;
  kube: KubeClient;
  release: Release;
  /** The live controllers, and this one's lease name among them. */
  controllers: { liveControllers(): LiveController[]; readonly self: string };
  restart: RestartRequest;
  /** The agents this controller's konnectivity server holds: its turn ends once they are back. */
  agents?: { agentIds(): string[] };
}

/**
 * Back at the target, a controller keeps its turn until its konnectivity server holds again every
 * agent another live controller holds (they reconnect within seconds), at most this long: the next
 * controller's restart then never leaves kube-apiservers whose tunnel has no agent yet.
 */
const AGENTS_BACK_MS = 60_000;

export class ControllerUpgradeComponent implements Component {
  readonly name = 'upgrade';
  private log!: Logger;
  private timer: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  private state: MemberUpgrade | undefined;
  private lastError: string | undefined;
  private readonly identity: string;
  private lease: LeaderLease | undefined;
  private nodes!: NodeUpgrades;
  /** When this controller came back at the target with its turn (waiting for its agents). */
  private backAt: number | undefined;

  constructor(private readonly o: ControllerUpgradeOptions) {
    this.identity = o.controllers.self;
  }

  async init(ctx: ComponentContext): Promise<void> {
    this.log = ctx.log;
    this.nodes = new NodeUpgrades(this.o.kube, ctx.log);
  }

  /** For this controller's lease. */
  memberUpgrade(): MemberUpgrade | undefined {
    return this.state;
  }

  async start(): Promise<void> {
    this.timer = setInterval(() => {
      this.ticking ??= this.tick()
        .catch((err: unknown) => {
          this.lastError = messageOf(err);
        })
        .finally(() => (this.ticking = undefined));
    }, CHECK_EVERY_MS);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.ticking;
  }

  status(): Partial<ComponentStatus> {
    return { lastError: this.lastError };
  }

  private report(target: string, state: MemberUpgrade['state'], extra: Partial<MemberUpgrade> = {}): void {
    if (this.state?.target !== target || this.state.state !== state || extra.reason !== this.state.reason)
      this.log.info(
        { target, state, ...extra },
        `upgrade to ${target}: ${state}${extra.reason ? `: ${extra.reason}` : ''}`,
      );
    this.state = { target, state, at: new Date().toISOString(), ...extra };
  }

  /** The upgrade lease, lasting this plan's ready timeout and the slack (a later plan may set another). */
  private upgradeLease(plan: UpgradePlan): LeaderLease {
    const durationS = plan.readyTimeoutS + LEASE_SLACK_S;
    if (this.lease?.durationS !== durationS)
      this.lease = new LeaderLease(this.o.kube, UPGRADE_LEASE, this.identity, Date.now, durationS);
    return this.lease;
  }

  private async tick(): Promise<void> {
    const plan = await readUpgradePlan(this.o.kube);
    this.lastError = undefined;
    if (!plan) return;
    const target = plan.target.version;
    const outcome = await readOutcome(this.o.paths.dataDir);
    if (outcome?.target === target) this.report(target, outcome.state, { reason: outcome.reason });
    if (this.o.release.version === target && this.state?.state !== 'done') this.report(target, 'done');
    if (plan.state === 'done' && this.o.release.version === target) await upgradeDone(this.o.paths.binRoot, this.log);
    if (plan.state !== 'active') {
      // A plan that ended without this controller's turn: it has nothing to wait for.
      if (this.state?.state === 'waiting' || this.state?.state === 'downloading') this.state = undefined;
      return;
    }
    const lease = this.upgradeLease(plan);
    if (this.o.release.version === target) {
      // Back at the target after a restart: the turn this controller took ends here, unless
      // every controller is done: then the lease is for letting the nodes go.
      if (!this.controllersDone(plan)) {
        if ((await lease.heldByMe()) && (await this.agentsBack(lease))) await lease.release(true);
      } else if (await lease.tryAcquireOrRenew()) await this.nodesTurn(plan, lease);
      return;
    }
    if (outcome?.target === target) {
      await this.stopPlan(plan, `${this.identity}: ${outcome.reason}; rolled back to ${this.o.release.version}`);
      if (await lease.heldByMe()) await lease.release(true);
      return;
    }
    if (this.state?.state !== 'waiting' && this.state?.state !== 'downloading') this.report(target, 'waiting');
    // Every other controller of the plan must be up (its lease live) and not upgrading itself.
    const live = new Map(this.o.controllers.liveControllers().map((c) => [c.name, c]));
    const notReady = plan.controllers.filter((name) => {
      const c = live.get(name);
      return (
        name !== this.identity &&
        (!c?.release || (c.upgrade?.target === target && ['downloading', 'restarting'].includes(c.upgrade.state)))
      );
    });
    if (notReady.length) return;
    if (!(await lease.tryAcquireOrRenew())) return;
    await this.takeTurn(plan);
  }

  /** True once this server holds every agent the other live controllers hold (or AGENTS_BACK_MS passed); renews the turn meanwhile. */
  private async agentsBack(lease: LeaderLease): Promise<boolean> {
    const mine = new Set(this.o.agents?.agentIds() ?? []);
    const others = this.o.controllers.liveControllers().filter((c) => c.name !== this.identity);
    const missing = [...new Set(others.flatMap((c) => c.agents))].filter((a) => !mine.has(a));
    const first = this.backAt === undefined;
    this.backAt ??= Date.now();
    const waited = Date.now() - this.backAt;
    if (missing.length === 0 || waited >= AGENTS_BACK_MS) {
      if (missing.length > 0)
        this.log.warn(
          { missing },
          `giving up the upgrade turn with ${missing.length} agent(s) not back after ${waited} ms`,
        );
      this.backAt = undefined;
      return true;
    }
    if (first)
      this.log.info(
        { missing: missing.length },
        'keeping the upgrade turn until the agents are back on this controller',
      );
    await lease.tryAcquireOrRenew();
    return false;
  }

  /** This controller's turn: fetch, check, keep the previous executable, restart into the new one. */
  private async takeTurn(plan: UpgradePlan): Promise<void> {
    const t = plan.target;
    const installed = kctlExecutable();
    if (!installed) {
      await this.stopPlan(plan, `${this.identity} does not run from a kctl executable and cannot swap it`);
      return;
    }
    const file = keptExecutable(this.o.paths.dataDir, t.version);
    await mkdir(dirname(file), { recursive: true, mode: 0o755 });
    this.report(t.version, 'downloading', { bytes: 0 });
    const creds = credentialsFromKubeconfig(this.o.pki.adminConf);
    await downloadExecutable({
      sources: () =>
        this.o.controllers
          .liveControllers()
          .filter((c) => c.name !== this.identity)
          .flatMap((c) => executableSource(c, t.version) ?? []),
      target: file,
      sha256: t.sha256,
      size: t.size,
      tls: async () => ({ ca: await readFile(this.o.pki.caCert), cert: creds.cert, key: creds.key }),
      progress: (bytes) => (this.state = { ...this.state!, bytes }),
      onError: (url, reason) => this.log.warn({ url, reason }, 'kctl download failed; trying again'),
      rounds: 5,
    });
    const problem =
      describedProblem(await releaseOfExecutable(file), t) ??
      skewProblem([{ name: this.identity, ...this.o.release }], t);
    if (problem) {
      await this.stopPlan(plan, problem);
      return;
    }
    // The executable running now stays for a rollback (and for `kctl reset` to remove).
    const previous = await keepForRollback(this.o.paths.dataDir, installed, this.o.release.version);
    this.report(t.version, 'restarting');
    await this.upgradeLease(plan).tryAcquireOrRenew();
    this.o.restart.request(
      { installed, next: file, previous, target: t.version, timeoutMs: plan.readyTimeoutS * 1000 },
      `upgrading to kctl ${t.version}`,
    );
  }

  /** Every controller of the plan, and every live one, reports itself done at the target (on its lease). */
  private controllersDone(plan: UpgradePlan): boolean {
    const target = plan.target.version;
    const live = this.o.controllers.liveControllers();
    // Done as each says it, not only running the release: it has checked its own readiness.
    const reportsDone = (c: LiveController) =>
      c.release?.version === target && c.upgrade?.target === target && c.upgrade.state === 'done';
    return (
      plan.controllers.every((name) => live.some((c) => c.name === name && reportsDone(c))) && live.every(reportsDone)
    );
  }

  /** With the lease, after the controllers: the nodes' turns; the plan is done when every node runs the target. */
  private async nodesTurn(plan: UpgradePlan, lease: LeaderLease): Promise<void> {
    const target = plan.target.version;
    const r = await this.nodes.pass(plan);
    const next = { ...plan, admitted: r.admitted };
    if (r.stop) {
      await this.stopPlan(next, r.stop);
      await lease.release(true);
    } else if (r.done) {
      this.log.info({ target }, `upgrade to ${target} done: every controller and node runs it`);
      await writeUpgradePlan(this.o.kube, {
        ...next,
        state: 'done',
        reason: `every controller and node runs kctl ${target}`,
      });
      await lease.release(true);
    } else if (JSON.stringify(r.admitted) !== JSON.stringify(plan.admitted)) await writeUpgradePlan(this.o.kube, next);
  }

  /** Stops the plan with `reason` (once; another controller may have done it first). */
  private async stopPlan(plan: UpgradePlan, reason: string): Promise<void> {
    this.log.error({ reason }, 'upgrade plan stopped');
    try {
      await writeUpgradePlan(this.o.kube, { ...plan, state: 'stopped', reason });
    } catch (err) {
      this.log.warn({ err: messageOf(err) }, 'cannot stop the upgrade plan (changed meanwhile?); checking again');
    }
  }
}
