// kctl as a systemd service (kctl install / uninstall / start / stop / restart): the unit file,
// and the checks that keep an install from half-working (systemd not running, an executable
// that will vanish, a unit already there).
//
// The unit follows what k0s and k3s operators know (Restart=always, Delegate=yes, high limits,
// network-online ordering) and adds: Type=notify (READY=1 only once the role really works,
// STATUS= progress; see notify.ts) and WatchdogSec (kctl pings from its event loop).
import { statfs } from 'node:fs/promises';
import { join } from 'node:path';
import { readFile } from 'node:fs/promises';
import { execa } from 'execa';
import { UserError } from '../base/errors.ts';

export type ServiceRole = 'controller' | 'worker';
export const SERVICE_ROLES: readonly ServiceRole[] = ['controller', 'worker'];
export const DEFAULT_UNIT_DIR = '/etc/systemd/system';
/** kctl pings at half of it; a kctl whose event loop stops for this long is restarted. */
export const WATCHDOG_SEC = 60;

export const unitName = (role: ServiceRole): string => `kctl-${role}.service`;
export const unitPath = (unitDir: string, role: ServiceRole): string => join(unitDir, unitName(role));
/** Tenant control planes (kctl controller --name): one template, an instance per tenant. */
export const TENANT_TEMPLATE = 'kctl-controller@.service';
export const tenantUnitName = (tenant: string): string => `kctl-controller@${tenant}.service`;
/** A tenant's own flags (--config, --port-range) and environment: a drop-in beside the template. */
export const tenantDropIn = (unitDir: string, tenant: string): string =>
  join(unitDir, `${tenantUnitName(tenant)}.d`, '10-kctl.conf');

export interface UnitSpec {
  role: ServiceRole;
  /** The absolute path of kctl and its arguments. No secret may be among them (ps shows them). */
  execStart: string[];
  env: Record<string, string>;
  /** The template of tenant control planes: `--name %i` ends ExecStart. */
  template?: boolean;
}

const execLine = (words: string[], template = false): string =>
  `ExecStart=${words.map(unitWord).join(' ')}${template ? ' --name %i' : ''}`;
const envLines = (env: Record<string, string>): string[] =>
  Object.entries(env).map(([k, v]) => `Environment=${unitWord(`${k}=${v}`)}`);

/** A tenant instance's drop-in: its own ExecStart (the template's is cleared first) and environment. */
export function renderTenantDropIn(execStart: string[], env: Record<string, string>): string {
  return [
    '# Written by kctl install controller --name; kctl uninstall --name removes it.',
    '[Service]',
    'ExecStart=',
    execLine(execStart),
    ...envLines(env),
    '',
  ].join('\n');
}

/** One ExecStart / Environment word, quoted for systemd when it needs it ($ and % are special there). */
export function unitWord(word: string): string {
  const escaped = word.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\$/g, '$$$$').replace(/%/g, '%%');
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? escaped : `"${escaped}"`;
}

export function renderUnit(spec: UnitSpec): string {
  const controller = spec.role === 'controller';
  const env = envLines(spec.env);
  return [
    '# Written by kctl install; kctl uninstall removes it.',
    '[Unit]',
    spec.template
      ? 'Description=kctl tenant %i: one of many Kubernetes control planes on this host (kctl controller --name)'
      : controller
        ? 'Description=kctl controller: Kubernetes control plane (storage, kube-apiserver, scheduler, controller-manager, konnectivity server)'
        : 'Description=kctl worker: Kubernetes node (containerd, kubelet, kube-proxy, konnectivity agent)',
    'After=network-online.target',
    'Wants=network-online.target',
    // Keep restarting however often it fails: a control host or an edge node has no one to press a button.
    'StartLimitIntervalSec=0',
    '',
    '[Service]',
    'Type=notify',
    // READY=1, STATUS= and WATCHDOG=1 come through systemd-notify, a child of kctl.
    'NotifyAccess=all',
    execLine(spec.execStart, spec.template),
    ...env,
    'Restart=always',
    'RestartSec=5',
    // A worker's first start joins the cluster and waits for the node to be Ready.
    'TimeoutStartSec=15min',
    // kctl stops its components in reverse order on SIGTERM; then systemd stops waiting.
    'TimeoutStopSec=3min',
    `WatchdogSec=${WATCHDOG_SEC}`,
    // SIGKILL, not the default SIGABRT: a Node process whose event loop is stuck does not act on
    // SIGABRT promptly (seen: still there after 15 s), and its core is of no use to an operator.
    'WatchdogSignal=SIGKILL',
    'Delegate=yes',
    // controller: SIGTERM to kctl alone (it stops its children in order); whatever is left after
    // it exited, also after a crash, is killed, so a restart never meets an old etcd or apiserver.
    // worker: SIGTERM to kctl alone and nothing else killed, so containers run on across a restart.
    `KillMode=${controller ? 'mixed' : 'process'}`,
    'LimitNOFILE=1048576',
    'LimitNPROC=infinity',
    'LimitCORE=infinity',
    'TasksMax=infinity',
    '',
    '[Install]',
    'WantedBy=multi-user.target',
    '',
  ].join('\n');
}

/** The name of PID 1 ('systemd' when systemd runs this host), '' when unreadable. */
export async function initProcessName(): Promise<string> {
  return (await readFile('/proc/1/comm', 'utf8').catch(() => '')).trim();
}

/** systemd must be PID 1 for a unit to mean anything. */
export async function requireSystemd(): Promise<void> {
  const init = await initProcessName();
  if (init !== 'systemd') {
    throw new UserError(
      `systemd is not running as PID 1 here (PID 1 is ${init || 'unknown'}); run kctl controller / kctl worker under your own supervisor instead`,
    );
  }
}

// statfs(2) magic numbers of file systems whose files are gone after a reboot.
const VOLATILE_FS: Record<number, string> = { 0x01021994: 'tmpfs', 0x858458f6: 'ramfs' };

/** The unit runs this file after every reboot: it must not live on a tmpfs. */
export async function requireDurableExecutable(path: string): Promise<void> {
  const fs = VOLATILE_FS[(await statfs(path)).type];
  if (fs)
    throw new UserError(
      `${path} is on a ${fs} and will be gone after a reboot; copy kctl to a lasting place (e.g. /usr/local/bin/kctl) and run install from there`,
    );
}

/** Runs systemctl; a failure is one line with systemctl's own words. */
export async function systemctl(
  args: string[],
  opts: { reject?: boolean } = {},
): Promise<{ ok: boolean; stdout: string }> {
  const r = await execa('systemctl', args, { reject: false, stdin: 'ignore' });
  const ok = r.exitCode === 0;
  if (!ok && opts.reject !== false) {
    const why = String(r.stderr).trim().split('\n')[0] || `exit code ${r.exitCode}`;
    throw new UserError(`systemctl ${args.join(' ')} failed: ${why}`);
  }
  return { ok, stdout: String(r.stdout) };
}
