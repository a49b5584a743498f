import type { Command } from 'commander';
import { globals } from './support/globals.ts';
import {
  createUpgradePlan,
  upgradeStatus,
  type MemberStatus,
  type UpgradeStatus,
} from '../controller/upgrades/upgrade-plan-run.ts';
import { KubeClient } from '../kube/client.ts';
import { localController, progressToStderr } from './support/controller-host.ts';
import { outputOption, printJson, renderTable, type OutputFormat } from './support/output.ts';

export function upgradeCommand(program: Command): void {
  const upgrade = program
    .command('upgrade')
    .description(
      'upgrade the cluster to a new kctl: controllers one at a time, then every node pulls it over its own connection',
    );
  upgrade
    .command('plan')
    .description(
      'record the target in the cluster (ConfigMap kube-system/kctl-upgrade-plan) after checking the version skew rules; ' +
        'run on a controller host, with the new kctl as --executable (or run the new kctl itself)',
    )
    .option('--executable <path>', 'the new kctl executable (default: the kctl running this command)')
    .option('--version <version>', 'the kctl version you expect it to be (refused if it is another)')
    .addOption(outputOption())
    .action(async (opts: { executable?: string; version?: string; output: OutputFormat }, cmd: Command) => {
      const { cfg, pki } = await localController(cmd);
      const plan = await createUpgradePlan({
        kube: KubeClient.fromKubeconfig(pki.adminConf),
        cfg,
        dataDir: globals(cmd).dataDir,
        executable: opts.executable,
        version: opts.version,
        progress: progressToStderr,
      });
      if (opts.output === 'json') printJson(plan);
      else
        process.stdout.write(
          `upgrade to kctl ${plan.target.version} (Kubernetes ${plan.target.kubernetes}) planned; follow it with kctl upgrade status\n`,
        );
    });
  upgrade
    .command('status')
    .description('the plan, and each controller and node: the version it runs and its upgrade state')
    .addOption(outputOption())
    .action(async (opts: { output: OutputFormat }, cmd: Command) => {
      const { pki } = await localController(cmd);
      const status = await upgradeStatus(KubeClient.fromKubeconfig(pki.adminConf));
      if (opts.output === 'json') printJson(status);
      else process.stdout.write(renderStatus(status).join('\n') + '\n');
    });
}

function renderStatus(s: UpgradeStatus): string[] {
  const p = s.plan;
  const head = p
    ? [
        `plan: kctl ${p.target.version} (Kubernetes ${p.target.kubernetes}, etcd ${p.target.etcd}), ${p.state}${p.reason ? `: ${p.reason}` : ''}`,
        `      created ${p.created}; drain ${p.drain ? `on (${p.drainTimeoutS} s)` : 'off'}, at most ${p.maxUnavailable} node(s) at once`,
      ]
    : ['plan: none (kctl upgrade plan writes one)'];
  const state = (m: MemberStatus): string => {
    if (m.down) return 'not running (no live lease)';
    if (m.draining) return 'draining';
    // A plan that ended left those that never took their turn with nothing to wait for.
    if (p?.state !== 'active' && (m.upgrade?.state === 'waiting' || m.upgrade?.state === 'downloading')) return '-';
    if (!m.upgrade)
      return p && m.release?.version === p.target.version ? 'done' : p?.state === 'active' ? 'waiting' : '-';
    const bytes =
      m.upgrade.state === 'downloading' && m.upgrade.bytes !== undefined && p
        ? ` ${Math.floor((m.upgrade.bytes / p.target.size) * 100)} %`
        : '';
    return `${m.upgrade.state}${bytes}${m.upgrade.reason ? `: ${m.upgrade.reason}` : ''}`;
  };
  const rows = s.members.map((m) => [
    m.kind,
    m.name,
    m.release?.version ?? '?',
    m.release?.kubernetes ?? m.kubelet ?? '?',
    p && p.state === 'active' ? p.target.version : '-',
    state(m),
  ]);
  return [...head, '', ...renderTable(['KIND', 'NAME', 'KCTL', 'KUBERNETES', 'TARGET', 'STATE'], rows)];
}
