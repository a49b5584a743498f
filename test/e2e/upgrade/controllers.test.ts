// Controllers upgrade themselves from a plan, one at a time, with the real parts: three controller
// hosts on etcd (one may be away: quorum holds) start on the previous kctl (dist/kctl-previous, Kubernetes v1.36.1), each from its
// own copy of the executable (an upgrade replaces the file it runs from). `kctl upgrade plan
// --executable dist/kctl` on the first: each controller in turn fetches it, restarts into it and
// releases its turn; the plan ends done, all run the new kctl and Kubernetes, the API answered
// through them all along, and never were two restarting at once. Then a plan to a build whose
// controller cannot start (dist/kctl-broken): the first controller to try it rolls back to the
// kctl it ran, the plan stops with the reason, `kctl upgrade status` shows it, and all serve.
import assert from 'node:assert/strict';
import { copyFile, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { sha256OfFile } from '../../../src/base/fs.ts';
import type { UpgradeStatus } from '../../../src/controller/upgrade-plan-run.ts';
import { HaLab, type LabCtl } from '../lab/ha-lab.ts';
import { requireBrokenKctl, requireKctl, requirePreviousKctl } from '../lab/kctl.ts';
import { startLab } from '../lab/lab-test.ts';
import { waitFor } from '../lab/wait.ts';

// The three builds unpack three runtimes; each kctl prunes runtimes no process runs when it unpacks
// its own. This file keeps its runtimes apart, so it never prunes one that the main run's dist/kctl
// is about to start (that run goes on beside it).
process.env.KCTL_RUNTIME_DIR = '/var/cache/kctl/runtime-upgrade-controllers';

test('controllers roll to the planned kctl one at a time while the API answers; a build that cannot start is rolled back and stops the plan', async (t: TestContext) => {
  const next = requireKctl();
  const previous = requirePreviousKctl();
  const broken = requireBrokenKctl();
  const { lab, dir } = await startLab(t, 'upg', ['c1', 'c2', 'c3'], { dir: 'kctl-upgrade-' });
  const labs: Record<string, HaLab> = {};
  const ctls: LabCtl[] = [];
  for (const name of ['c1', 'c2', 'c3']) {
    // Each controller host runs its own copy, as an installed kctl would be.
    const bin = join(dir, `${name}-bin`, 'kctl');
    await mkdir(join(dir, `${name}-bin`));
    await copyFile(previous.path, bin);
    labs[name] = new HaLab(bin, dir);
    const host = lab.host(name);
    ctls.push(
      await labs[name].controller(
        host,
        `  api: { address: ${host.ip} }\n  storage: { type: etcd, etcd: { memberName: ${name} } }\n  upgrade: { readyTimeout: 3m }\n`,
      ),
    );
  }
  const [c1, c2, c3] = ctls as [LabCtl, LabCtl, LabCtl];
  const ha = (c: LabCtl) => labs[c.host.name]!;
  await ha(c1).start(c1);
  const ctoken = String((await ha(c1).run(c1, ['token', 'create', '--role', 'controller'])).stdout).trim();
  await ha(c2).start(c2, await ha(c2).tokenFile('c2.token', ctoken));
  const ctoken3 = String((await ha(c1).run(c1, ['token', 'create', '--role', 'controller'])).stdout).trim();
  await ha(c3).start(c3, await ha(c3).tokenFile('c3.token', ctoken3));
  const logs = () => ctls.map((c) => `--- ${c.host.name}\n${c.proc!.log().slice(-3000)}`).join('\n');

  const status = async (): Promise<UpgradeStatus> => {
    const r = await ha(c1).run(c1, ['upgrade', 'status', '-o', 'json']);
    assert.equal(r.exitCode, 0, String(r.stderr));
    return JSON.parse(String(r.stdout)) as UpgradeStatus;
  };
  const before = await status();
  assert.equal(before.plan, null);
  assert.deepEqual(
    before.members.map((m) => [m.kind, m.release?.version, m.release?.kubernetes]),
    ctls.map(() => ['controller', previous.version, previous.kubernetes]),
  );

  // Refused with one line each, nothing written: not a kctl, not the version asked for, nothing to do.
  for (const [args, expect] of [
    [['--executable', '/etc/hostname'], /\/etc\/hostname is not a kctl executable that runs here/],
    [['--executable', next, '--version', '9.9.9'], /is kctl \S+, not 9\.9\.9; give the executable of 9\.9\.9 with --executable/],
    [['--executable', previous.path], /every controller and node already runs kctl .*; nothing to upgrade/],
  ] as const) {
    const r = await ha(c1).run(c1, ['upgrade', 'plan', ...args]);
    assert.notEqual(r.exitCode, 0, `upgrade plan ${args.join(' ')} was accepted`);
    assert.equal(String(r.stderr).trim().split('\n').length, 1, String(r.stderr));
    assert.match(String(r.stderr), expect);
  }
  assert.equal((await status()).plan, null);

  // The API through any controller, every 250 ms, from the start of the plan to its end.
  const answered: number[] = [];
  let probing = true;
  const probe = (async () => {
    for (let i = 0; probing; i++) {
      const c = ctls[i % 3]!;
      const r = await ha(c)
        .kubectl(c, ['get', 'namespace', 'kube-system', '-o', 'name', '--request-timeout', '2s'])
        .catch(() => null);
      if (r?.exitCode === 0) answered.push(Date.now());
      await sleep(250);
    }
  })();
  const planned = await ha(c1).run(c1, ['upgrade', 'plan', '--executable', next]);
  assert.equal(planned.exitCode, 0, String(planned.stderr));
  const started = Date.now();
  let twoAtOnce = false;
  const done = await waitFor(
    'the plan done',
    900_000,
    async () => {
      const s = await status().catch(() => null);
      if (!s) return false;
      const restarting = s.members.filter((m) => m.upgrade?.state === 'restarting' || m.upgrade?.state === 'downloading');
      if (restarting.length > 1) twoAtOnce = true;
      if (s.plan?.state === 'stopped') throw new Error(`the plan stopped: ${s.plan.reason}`);
      return s.plan?.state === 'done' && s;
    },
    logs,
  );
  probing = false;
  await probe;
  assert.equal(twoAtOnce, false, 'two controllers were upgrading at once');
  const gaps = [started, ...answered.filter((x) => x >= started)].map((x, i, a) => (i ? x - a[i - 1]! : 0));
  assert.ok(Math.max(...gaps) < 10_000, `the API did not answer for ${Math.max(...gaps)} ms during the upgrade`);
  const nextVersion = String((await ha(c1).run(c1, ['version'])).stdout)
    .split('\n')[0]!
    .replace('kctl ', '');
  assert.deepEqual(
    done.members.map((m) => [m.release?.version, m.release?.kubernetes, m.upgrade?.state]),
    ctls.map(() => [nextVersion, 'v1.36.3', 'done']),
  );
  const nextSha = await sha256OfFile(next);
  for (const c of ctls) {
    const v = await ha(c).kubectl(c, ['version', '-o', 'json']);
    assert.equal((JSON.parse(String(v.stdout)) as { serverVersion: { gitVersion: string } }).serverVersion.gitVersion, 'v1.36.3');
    assert.equal(await sha256OfFile(ha(c).kctlBin), nextSha, `${c.host.name} runs from a file that is not the plan's`);
    assert.equal(
      await sha256OfFile(join(c.dataDir, 'upgrade', `kctl-${previous.version}`)),
      await sha256OfFile(previous.path),
      'the previous kctl is kept',
    );
    assert.equal(c.proc!.child.exitCode, null, `${c.host.name}'s kctl ended`);
  }

  // A target that cannot start: the first controller to take its turn goes back, and the plan stops.
  const plannedBroken = await ha(c1).run(c1, ['upgrade', 'plan', '--executable', broken.path]);
  assert.equal(plannedBroken.exitCode, 0, String(plannedBroken.stderr));
  const stopped = await waitFor(
    'the plan to the broken build stopped',
    600_000,
    async () => {
      const s = await status().catch(() => null);
      return s?.plan?.state === 'stopped' && s.members.some((m) => m.upgrade?.state === 'rolled back') && s;
    },
    logs,
  );
  assert.match(stopped.plan!.reason!, /kctl-controller-.*: it exited \(code \d+\) before it was ready; rolled back to /);
  const rolled = stopped.members.filter((m) => m.upgrade?.state === 'rolled back');
  assert.equal(rolled.length, 1);
  assert.match(rolled[0]!.upgrade!.reason!, /it exited \(code \d+\) before it was ready/);
  const text = String((await ha(c1).run(c1, ['upgrade', 'status'])).stdout);
  t.diagnostic(`kctl upgrade status after the rollback:\n${text}`);
  assert.match(text, /plan: kctl .*-broken .* stopped: /);
  assert.match(text, /rolled back: it exited/);
  await waitFor('every controller serves at the kctl it ran', 300_000, async () => {
    const s = await status().catch(() => null);
    return s?.members.every((m) => m.release?.version === nextVersion) && s.members.length === 3;
  });
  for (const c of ctls) {
    assert.equal(await sha256OfFile(ha(c).kctlBin), nextSha, `${c.host.name} was not put back to the kctl it ran`);
    const r = await ha(c).kubectl(c, ['get', 'namespace', 'kube-system', '-o', 'name']);
    assert.equal(r.exitCode, 0, `${c.host.name}: ${String(r.stderr)}`);
  }
});
