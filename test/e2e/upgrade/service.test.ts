// An upgrade under systemd, with the units `kctl install` writes, each in a real systemd
// (systemd.ts): a controller on one lab host and a worker on another (isolated: it only dials
// out), both installed from the previous kctl (dist/kctl-previous) with a 10 s watchdog. Before
// the plan, a damaged plan object is reported in one line and `kctl upgrade plan` replaces it.
// Then `kctl upgrade plan --executable dist/kctl`: each member hands its role to the new kctl
// without systemd seeing a stop. The unit stays active, its main PID moves once (MAINPID=) to the
// new process, NRestarts stays 0, and the old process pings the watchdog while the new one starts:
// the test stops the new process (SIGSTOP) for longer than the watchdog's interval while it
// starts, so only the old one's pings keep the unit alive. Afterwards the new process keeps the
// watchdog fed, and when its event loop is blocked (the test hook), the watchdog restarts it:
// systemd watches the new process, not the one that started it.
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { isDeepStrictEqual } from 'node:util';
import type { UpgradeStatus } from '../../../src/controller/upgrades/upgrade-plan-run.ts';
import { UPGRADE_NAMESPACE, UPGRADE_PLAN_NAME } from '../../../src/kube/upgrade-plan.ts';
import { nodeReady, runPinnedPod } from '../lab/cluster.ts';
import { ownCopy, requireKctl, requirePreviousKctl } from '../lab/kctl.ts';
import { startLab } from '../lab/lab-test.ts';
import { bootSystemd, setWatchdog, type SystemdLab } from '../lab/systemd.ts';
import { waitFor } from '../../wait.ts';

// Runtimes apart from the main run's, which goes on beside this file (see cluster.test.ts).
const RUNTIME_DIR = '/var/cache/kctl/runtime-upgrade-service';
process.env.KCTL_RUNTIME_DIR = RUNTIME_DIR;
// Long enough for a kctl restarted by it to send its first ping on a loaded machine: with 4 s, a
// loaded CI run saw the controller's main PID change twice in one upgrade, and here a restart by
// the watchdog was restarted again before it pinged.
const WATCHDOG_S = 10;
/** How long the new kctl is held stopped while it starts: only the old one pings meanwhile. */
const HOLD_MS = (WATCHDOG_S + 5) * 1000;

interface UnitState {
  mainPid: number;
  active: string;
  restarts: number;
}

/** One installed kctl unit in its systemd lab. */
class Unit {
  constructor(
    readonly sd: SystemdLab,
    readonly name: 'kctl-controller' | 'kctl-worker',
    readonly kctlBin: string,
    private readonly dirs: string[],
  ) {}

  kctl(args: string[], input?: string) {
    return this.sd.exec(this.kctlBin, [...this.dirs, ...args], { input, timeout: 120_000 });
  }

  async state(): Promise<UnitState> {
    const out = String(
      (await this.sd.exec('systemctl', ['show', '-p', 'MainPID,ActiveState,NRestarts', this.name])).stdout,
    );
    const v = Object.fromEntries(out.split('\n').map((l) => l.split('=') as [string, string]));
    return { mainPid: Number(v.MainPID), active: v.ActiveState ?? '?', restarts: Number(v.NRestarts) };
  }

  async journal(): Promise<string> {
    return String((await this.sd.exec('journalctl', ['-u', this.name, '--no-pager', '-o', 'cat'])).stdout);
  }

  async tail(): Promise<string> {
    // systemd's "Killing process" lines would crowd out kctl's own last words.
    const lines = (await this.journal()).split('\n').filter((l) => !l.includes(': Killing process '));
    return `--- ${this.name}\n${lines.slice(-40).join('\n')}`;
  }

  /** systemd's own lines about the unit (watchdog timeouts, restarts, notifications it refused). */
  async systemdLines(): Promise<string[]> {
    const all = String((await this.sd.exec('journalctl', ['--no-pager', '-o', 'cat'])).stdout);
    return all.split('\n').filter((l) => l.includes(`${this.name}.service: `));
  }

  /** What systemd said about the unit, kctl's lines about the handover (every process's) and the unit's last lines. */
  async story(): Promise<string> {
    const handover = (await this.journal())
      .split('\n')
      .filter((l) =>
        /"msg":"(starting the new kctl|the new kctl|pinging the systemd watchdog|cannot notify|a watchdog ping ran late|systemd-notify took long)/.test(
          l,
        ),
      );
    return `systemd on ${this.name}:\n${(await this.systemdLines()).slice(-30).join('\n')}\nkctl on the handover:\n${handover.join('\n')}\n${await this.tail()}`;
  }

  /**
   * The new kctl the main process `parent` started for the handover, if any: its child with the
   * same command line (the launcher execs the runtime with the same argv). Not another kctl it runs
   * meanwhile, such as the version check of the downloaded executable.
   */
  async newKctl(parent: number): Promise<number | undefined> {
    const r = await this.sd.exec('sh', [
      '-c',
      `m=$(tr '\\0' ' ' < /proc/${parent}/cmdline); for p in $(pgrep -P ${parent}); do [ "$(tr '\\0' ' ' < /proc/$p/cmdline)" = "$m" ] && echo $p; done`,
    ]);
    const pid = Number(String(r.stdout).trim().split('\n')[0]);
    return pid > 0 ? pid : undefined;
  }

  /**
   * Holds the new kctl stopped for HOLD_MS while it starts (the old main process still the unit's),
   * then lets it go on: the watchdog then lives on the old process's pings alone. Says how long it held.
   */
  async holdNewKctl(parent: number, child: number): Promise<string> {
    await this.sd.exec('kill', ['-STOP', String(child)]);
    const held = Date.now();
    const during = await this.state();
    if (during.mainPid !== parent) {
      await this.sd.exec('kill', ['-CONT', String(child)]);
      return `too late: the main PID was already ${during.mainPid}`;
    }
    await sleep(HOLD_MS);
    await this.sd.exec('kill', ['-CONT', String(child)]);
    return `held ${((Date.now() - held) / 1000).toFixed(1)} s`;
  }
}

test(
  'under systemd, an upgrade hands each unit to the new kctl (MAINPID=, no restart, the watchdog fed throughout) and systemd then watches the new process',
  { timeout: 20 * 60_000 },
  async (t: TestContext) => {
    const next = requireKctl();
    const previous = requirePreviousKctl();
    // Not under /tmp: each systemd lab has its own /tmp.
    const { lab, dir } = await startLab(t, 'us', ['ctl', 'w1'], {
      dir: '/var/lib/kctl-test-upgrade-service-',
      workers: ['w1'],
    });
    const [ctlHost, w1Host] = [lab.host('ctl'), lab.host('w1')];
    const env = ['--env', `KCTL_RUNTIME_DIR=${RUNTIME_DIR}`, '--env', 'KCTL_TEST_HANG_ON_SIGNAL=SIGUSR1'];

    const ctl = new Unit(
      await bootSystemd('kctl-upg-ctl', ctlHost.netns, t),
      'kctl-controller',
      await ownCopy(dir, 'ctl', previous.path),
      ['--data-dir', join(dir, 'c-data'), '--run-dir', join(dir, 'c-run')],
    );
    const cfg = join(dir, 'kctl.yaml');
    await writeFile(
      cfg,
      `spec:\n  api: { address: ${ctlHost.ip} }\n  upgrade: { readyTimeout: 3m, drainTimeout: 1m }\n`,
    );
    const installed = await ctl.kctl(['install', 'controller', '--single', '--config', cfg, ...env]);
    assert.equal(installed.exitCode, 0, String(installed.stderr));
    await setWatchdog(ctl.sd, ctl.name, WATCHDOG_S); // the unit's own is 60 s
    const started = await ctl.kctl(['start']);
    assert.equal(started.exitCode, 0, `${String(started.stderr)}\n${await ctl.tail()}`);
    const kubectl = (args: string[], input?: string) => ctl.kctl(['kubectl', ...args], input);

    await lab.isolate(w1Host, ctlHost);
    const token = await ctl.kctl(['token', 'create', '--role', 'worker', '--expiry', '1h']);
    assert.equal(token.exitCode, 0, String(token.stderr));
    const tokenFile = join(dir, 'token');
    await writeFile(tokenFile, String(token.stdout).trim() + '\n', { mode: 0o600 });
    const worker = new Unit(
      await bootSystemd('kctl-upg-w1', w1Host.netns, t),
      'kctl-worker',
      await ownCopy(dir, 'w1', previous.path),
      ['--data-dir', join(dir, 'w1-data'), '--run-dir', join(dir, 'w1-run')],
    );
    const joined = await worker.kctl([
      'install',
      'worker',
      '--token-file',
      tokenFile,
      '--node-name',
      'w1',
      '--node-ip',
      w1Host.ip,
      ...env,
    ]);
    assert.equal(joined.exitCode, 0, String(joined.stderr));
    await setWatchdog(worker.sd, worker.name, WATCHDOG_S);
    const workerStarted = await worker.kctl(['start']);
    assert.equal(workerStarted.exitCode, 0, `${String(workerStarted.stderr)}\n${await worker.tail()}`);
    assert.equal(await nodeReady(kubectl, 'w1'), true);
    await runPinnedPod(kubectl, 'steady', 'w1', 'up');
    const containerId = async () =>
      String(
        (await kubectl(['get', 'pod', 'steady', '-o', 'jsonpath={.status.containerStatuses[0].containerID}'])).stdout,
      );
    const container = await containerId();
    const units = [ctl, worker];
    const tails = async () => (await Promise.all(units.map((u) => u.tail()))).join('\n');

    const status = async (): Promise<UpgradeStatus> => {
      const r = await ctl.kctl(['upgrade', 'status', '-o', 'json']);
      assert.equal(r.exitCode, 0, String(r.stderr));
      return JSON.parse(String(r.stdout)) as UpgradeStatus;
    };

    // A plan object damaged by hand: status names the field in one line and what to do; a new plan replaces it.
    const damaged = await kubectl(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: UPGRADE_PLAN_NAME, namespace: UPGRADE_NAMESPACE },
        data: {
          ...Object.fromEntries(['version', 'kubernetes', 'etcd', 'created'].map((f) => [f, 'x'])),
          ...Object.fromEntries(['size', 'drainTimeoutS', 'maxUnavailable', 'readyTimeoutS'].map((f) => [f, '60'])),
          sha256: 'f'.repeat(64),
          state: 'active',
          drain: 'yes',
        },
      }),
    );
    assert.equal(damaged.exitCode, 0, String(damaged.stderr));
    const unreadable = await ctl.kctl(['upgrade', 'status']);
    assert.notEqual(unreadable.exitCode, 0);
    assert.equal(
      String(unreadable.stderr).trim(),
      `kctl: ConfigMap ${UPGRADE_NAMESPACE}/${UPGRADE_PLAN_NAME}: drain is "yes", not true or false; run kctl upgrade plan again to replace it`,
    );

    const before = await Promise.all(units.map((u) => u.state()));
    for (const [i, s] of before.entries())
      if (s.active !== 'active' || s.restarts !== 0)
        assert.fail(`${units[i]!.name} before the plan: ${JSON.stringify(s)}\n${await units[i]!.story()}`);
    // Watch both units from the plan to its end: every main PID, any state but active, the restart count.
    const seen = units.map((_, i) => ({
      pids: [before[i]!.mainPid],
      notActive: [] as string[],
      restarts: before[i]!.restarts,
      hold: undefined as Promise<string> | undefined,
    }));
    let watching = true;
    const watch = (async () => {
      while (watching) {
        const now = await Promise.all(units.map((u) => u.state()));
        for (const [i, s] of now.entries()) {
          const w = seen[i]!;
          if (s.mainPid > 0 && s.mainPid !== w.pids.at(-1)) w.pids.push(s.mainPid);
          if (s.active !== 'active') w.notActive.push(`${s.active} (main pid ${s.mainPid})`);
          w.restarts = Math.max(w.restarts, s.restarts);
          if (!w.hold && w.pids.length === 1) {
            const child = await units[i]!.newKctl(w.pids[0]!);
            if (child) w.hold = units[i]!.holdNewKctl(w.pids[0]!, child);
          }
        }
        await sleep(250);
      }
    })();

    const planned = await ctl.kctl(['upgrade', 'plan', '--executable', next]);
    assert.equal(planned.exitCode, 0, String(planned.stderr));
    assert.match(String(planned.stderr), /replacing the unreadable plan: .*drain is "yes"/);
    // The controller may take its turn at once: its kube-apiserver then restarts, and status
    // is refused for that moment.
    const nextVersion = (await waitFor('the plan readable', 60_000, () => status().catch(() => null), tails)).plan!
      .target.version;
    await waitFor(
      'the plan done',
      900_000,
      async () => {
        const s = await status().catch(() => null);
        if (s?.plan?.state === 'stopped') throw new Error(`the plan stopped: ${s.plan.reason}`);
        return s?.plan?.state === 'done';
      },
      tails,
    );
    // A node reports done once Ready at the new version, which can be a moment before its old
    // process's readiness check passes and it hands the unit over: the watch goes on until then.
    await waitFor('both units handed over', 120_000, async () => seen.every((w) => w.pids.length >= 2), tails);
    watching = false;
    await watch;

    for (const [i, u] of units.entries()) {
      const w = seen[i]!;
      const [oldPid, newPid] = w.pids;
      const lines = await u.systemdLines();
      if (w.pids.length !== 2)
        assert.fail(
          `${u.name}: main PIDs ${w.pids.join(' → ')}, expected one handover (${w.restarts} restart(s), not active: ${[...new Set(w.notActive)].join(', ') || 'never'})\n${await u.story()}`,
        );
      if (w.notActive.length)
        assert.fail(
          `${u.name} left the active state during the upgrade: ${[...new Set(w.notActive)].join(', ')} (main PIDs ${w.pids.join(' → ')}, ${w.restarts} restart(s))\n${await u.story()}`,
        );
      // The story is read only for a failure (each read is a journalctl in the lab).
      if (w.restarts !== 0)
        assert.fail(`${u.name} was restarted by systemd during the upgrade (${w.restarts})\n${await u.story()}`);
      if (lines.some((l) => /Watchdog timeout/.test(l)))
        assert.fail(`${u.name}: a watchdog timeout during the upgrade\n${await u.story()}`);
      // The old process alone kept the watchdog fed while the new one was held stopped.
      const hold = await w.hold;
      assert.match(String(hold), /^held /, `${u.name}: the new kctl was not held while it started (${String(hold)})`);
      // The new main process is the one that logged it was ready, started by the old one; the old one is gone.
      const j = await u.journal();
      assert.match(j, new RegExp(`"pid":${newPid},"msg":"the new kctl is ready"`));
      assert.notEqual(
        (await u.sd.exec('kill', ['-0', String(oldPid)])).exitCode,
        0,
        `${u.name}: the old kctl (${oldPid}) still runs`,
      );
      const at = (msg: string) =>
        Date.parse(
          (j.split('\n').find((l) => l.includes(`"msg":"${msg}"`)) ?? '').replace(/^.*"time":"([^"]+)".*$/, '$1'),
        );
      const handoverMs = at('the new kctl is ready') - at('starting the new kctl');
      t.diagnostic(
        `${u.name}: handed over in ${(handoverMs / 1000).toFixed(1)} s, the new kctl ${hold} (watchdog ${WATCHDOG_S} s)`,
      );
      // A new kctl held stopped cannot be ready: the handover outlasted the hold, or another process was held.
      if (!(handoverMs >= HOLD_MS))
        assert.fail(`${u.name}: handed over in ${handoverMs} ms though its new kctl was ${hold}\n${await u.story()}`);
      const v = await u.kctl(['version']);
      assert.equal(String(v.stdout).split('\n')[0], `kctl ${nextVersion}`);
    }
    assert.equal(await containerId(), container, "the pod's container did not run on through the worker's upgrade");

    // The new processes feed the watchdog: three intervals later, no timeout and the same main PIDs.
    await sleep(3 * WATCHDOG_S * 1000);
    for (const [i, u] of units.entries()) {
      const s = await u.state();
      const want = { mainPid: seen[i]!.pids[1]!, active: 'active', restarts: 0 };
      if (!isDeepStrictEqual(s, want))
        assert.deepEqual(s, want, `${u.name} after ${3 * WATCHDOG_S} s\n${await u.story()}`);
    }

    // A new process whose event loop blocks stops the pings: systemd's watchdog restarts it.
    await Promise.all(
      units.map(async (u, i) => {
        const hung = seen[i]!.pids[1]!;
        await u.sd.exec('kill', ['-USR1', String(hung)]);
        await waitFor(
          `the watchdog to restart ${u.name}`,
          240_000,
          async () => {
            const s = await u.state();
            return s.mainPid > 0 && s.mainPid !== hung && s.active === 'active' && s.restarts === 1;
          },
          () => u.story(),
        );
        assert.ok((await u.systemdLines()).some((l) => /Watchdog timeout/.test(l)));
      }),
    );
    await waitFor('w1 Ready after the watchdog restart', 180_000, () => nodeReady(kubectl, 'w1'), tails);
    assert.equal(await containerId(), container, "the pod's container did not run on through the watchdog restart");
    for (const u of units)
      assert.equal(String((await u.kctl(['version'])).stdout).split('\n')[0], `kctl ${nextVersion}`);
  },
);
