// Pre-flight checks of a host for a role (kctl sysinfo): each check passes, warns or fails with a
// one-line reason. `kctl controller` and `kctl worker` run the ones that can fail before they
// touch anything and refuse with the same lines.
import { existsSync } from 'node:fs';
import { readFile, readdir, statfs } from 'node:fs/promises';
import { delimiter, dirname, join } from 'node:path';
import { release } from 'node:os';
import { UserError } from '../base/errors.ts';
import { readPidFile } from '../supervisor/pidfile.ts';
import { initProcessName } from '../supervisor/systemd.ts';
import { KERNEL_LIMITS, readSysctl } from './limits.ts';
import { portHolders } from '../supervisor/port-holders.ts';

export type HostRole = 'controller' | 'worker';
export type CheckResult = 'pass' | 'warn' | 'fail';

export interface Check {
  name: string;
  result: CheckResult;
  detail: string;
}

export interface HostCheckOptions {
  role: HostRole;
  dataDir: string;
  /** Ports the role will listen on, by what uses them. */
  ports: Record<string, number>;
  /** Pids whose ports do not count as taken (stale children of an earlier kctl, stopped at start). */
  ownPids?: ReadonlySet<number>;
  /** What to do about a port in use; default: free it, or pick another port in the config. */
  portAdvice?: string;
}

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;
/** Before this, certificates kctl issues look not yet valid to everyone else. */
const EARLIEST_SANE_CLOCK = Date.UTC(2026, 0, 1);

const check = (name: string, result: CheckResult, detail: string): Check => ({ name, result, detail });

function kernel(): Check {
  const [major = 0, minor = 0] = release()
    .split('.')
    .map((n) => Number.parseInt(n, 10));
  if (major > 4 || (major === 4 && minor >= 19)) return check('kernel', 'pass', `Linux ${release()}`);
  return check('kernel', 'warn', `Linux ${release()} is older than 4.19; containerd and kubelet are not tested on it`);
}

async function modules(role: HostRole): Promise<Check[]> {
  const loaded = new Set(
    (await readFile('/proc/modules', 'utf8').catch(() => '')).split('\n').map((l) => l.split(' ')[0]),
  );
  const filesystems = await readFile('/proc/filesystems', 'utf8').catch(() => '');
  const out: Check[] = [];
  for (const m of ['overlay', 'br_netfilter', 'veth', 'nf_conntrack', 'vxlan']) {
    const present =
      loaded.has(m) ||
      existsSync(`/sys/module/${m}`) ||
      (m === 'overlay' && /\toverlay$/m.test(filesystems)) ||
      (m === 'br_netfilter' && existsSync('/proc/sys/net/bridge'));
    if (present) out.push(check(`module ${m}`, 'pass', 'loaded or built in'));
    else if (role === 'controller') out.push(check(`module ${m}`, 'pass', 'not needed on a controller'));
    else if (m === 'overlay')
      out.push(
        check(`module ${m}`, 'fail', 'overlay file system not available; modprobe overlay (containerd needs it)'),
      );
    else if (m === 'vxlan')
      out.push(
        check(
          `module ${m}`,
          'warn',
          'not seen loaded; modprobe vxlan (needed when the cluster runs spec.network.mode: vxlan)',
        ),
      );
    else
      out.push(check(`module ${m}`, 'warn', `not seen loaded; modprobe ${m} (ignore if it is built into the kernel)`));
  }
  return out;
}

async function cgroups(role: HostRole): Promise<Check> {
  const v1 = (await readFile('/proc/cgroups', 'utf8').catch(() => ''))
    .split('\n')
    .filter((l) => l && !l.startsWith('#'))
    .map((l) => l.split('\t'))
    .filter((f) => f[3] === '1')
    .map((f) => f[0]!);
  const v2 = (await readFile('/sys/fs/cgroup/cgroup.controllers', 'utf8').catch(() => ''))
    .trim()
    .split(/\s+/)
    .filter(Boolean);
  const have = new Set([...v1, ...v2]);
  const version = v2.length > 0 ? 'v2' : 'v1';
  const missing = ['cpu', 'memory', 'pids'].filter((c) => !have.has(c));
  if (missing.length === 0) return check('cgroups', 'pass', `${version}: ${[...have].sort().join(', ')}`);
  return check(
    'cgroups',
    role === 'worker' ? 'fail' : 'warn',
    `${version}: controller(s) ${missing.join(', ')} not enabled; kubelet needs them`,
  );
}

function onPath(cmd: string): boolean {
  return (process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin')
    .split(delimiter)
    .some((d) => d && existsSync(join(d, cmd)));
}

function executables(role: HostRole): Check[] {
  if (role === 'controller') return [check('executables', 'pass', 'none needed: every component is inside kctl')];
  const out: Check[] = [];
  const firewall = onPath('iptables') ? 'iptables' : onPath('nft') ? 'nft' : undefined;
  out.push(
    firewall
      ? check('iptables/nftables', 'pass', `${firewall} found`)
      : check('iptables/nftables', 'fail', 'neither iptables nor nft on PATH; install iptables'),
  );
  const missing = ['ip', 'mount', 'umount'].filter((c) => !onPath(c));
  out.push(
    missing.length
      ? check('executables', 'fail', `${missing.join(', ')} not on PATH; install iproute2 / util-linux`)
      : check('executables', 'pass', 'ip, mount, umount found'),
  );
  if (role === 'worker' && !onPath('nft'))
    out.push(
      check(
        'nft',
        'warn',
        'not on PATH; install the nftables package (NetworkPolicy is enforced with it: spec.network.policy)',
      ),
    );
  if (role === 'worker' && !existsSync('/dev/net/tun'))
    out.push(
      check(
        'TUN device',
        'warn',
        '/dev/net/tun is missing; modprobe tun (needed when the cluster runs spec.network.mode: wireguard)',
      ),
    );
  if (!onPath('modprobe')) out.push(check('modprobe', 'warn', 'not on PATH; kernel modules must be loaded by hand'));
  return out;
}

async function ports(o: HostCheckOptions): Promise<Check[]> {
  const out: Check[] = [];
  for (const [what, port] of Object.entries(o.ports)) {
    const holders = (await portHolders(port)).filter((h) => !o.ownPids?.has(h.pid));
    if (holders.length === 0) {
      out.push(check(`port ${port}`, 'pass', `free (${what})`));
      continue;
    }
    const by = holders
      .map((h) => (h.pid ? `pid ${h.pid}${h.name ? ` (${h.name})` : ''}` : 'a process in another namespace'))
      .join(', ');
    out.push(
      check(
        `port ${port}`,
        'fail',
        `in use by ${by}; ${what} needs it (${o.portAdvice ?? 'free it, or pick another port in the config'})`,
      ),
    );
  }
  return out;
}

/** The data dir or, before it exists, the nearest parent that does. */
function existingParent(dir: string): string {
  let d = dir;
  while (!existsSync(d) && dirname(d) !== d) d = dirname(d);
  return d;
}

async function disk(o: HostCheckOptions): Promise<Check[]> {
  const at = existingParent(o.dataDir);
  const s = await statfs(at);
  const free = s.bavail * s.bsize;
  const need = o.role === 'controller' ? GiB : 2 * GiB;
  const fmt = (n: number) => (n >= GiB ? `${(n / GiB).toFixed(1)} GiB` : `${Math.round(n / MiB)} MiB`);
  const space =
    free < need
      ? check(
          'disk',
          'fail',
          `${fmt(free)} free under ${at}; the ${o.role} needs at least ${fmt(need)} (staged binaries, data); free space or use another --data-dir`,
        )
      : check('disk', free < 5 * need ? 'warn' : 'pass', `${fmt(free)} free under ${at}`);
  const inodes =
    s.files > 0 && s.ffree < 10_000
      ? check('inodes', 'fail', `${s.ffree} free inodes under ${at}; at least 10000 needed`)
      : check('inodes', 'pass', s.files > 0 ? `${s.ffree} free under ${at}` : `not limited under ${at}`);
  return [space, inodes];
}

async function memory(role: HostRole): Promise<Check> {
  const kb = Number(/^MemTotal:\s+(\d+)/m.exec(await readFile('/proc/meminfo', 'utf8').catch(() => ''))?.[1] ?? 0);
  const total = kb * 1024;
  const min = role === 'controller' ? GiB : 512 * MiB;
  const text = `${(total / GiB).toFixed(1)} GiB total`;
  if (total < min) return check('memory', 'fail', `${text}; the ${role} needs at least ${min / MiB} MiB`);
  return check('memory', total < 2 * min ? 'warn' : 'pass', text);
}

async function ipForward(role: HostRole): Promise<Check> {
  const v = (await readFile('/proc/sys/net/ipv4/ip_forward', 'utf8').catch(() => '?')).trim();
  if (v === '1' || role === 'controller')
    return check('ip_forward', 'pass', `net.ipv4.ip_forward=${v}${v === '1' ? '' : ' (not needed on a controller)'}`);
  return check('ip_forward', 'pass', `net.ipv4.ip_forward=${v}; kctl worker sets it to 1 at start`);
}

async function kernelLimits(): Promise<Check> {
  const low: string[] = [];
  const all: string[] = [];
  for (const [key, floor] of Object.entries(KERNEL_LIMITS)) {
    const v = await readSysctl(key);
    all.push(`${key}=${v ?? '?'}`);
    if (v !== undefined && v < floor) low.push(`${key} to ${floor}`);
  }
  return check(
    'kernel limits',
    'pass',
    low.length ? `${all.join(', ')}; kctl raises ${low.join(' and ')} at start` : all.join(', '),
  );
}

function clock(): Check {
  const now = new Date();
  if (now.getTime() < EARLIEST_SANE_CLOCK)
    return check(
      'clock',
      'fail',
      `the clock says ${now.toISOString()}; certificates would not be valid yet; set the time (NTP)`,
    );
  return check('clock', 'pass', now.toISOString());
}

async function systemd(): Promise<Check> {
  const init = await initProcessName();
  if (init === 'systemd') return check('systemd', 'pass', 'PID 1 is systemd: kctl install works');
  return check(
    'systemd',
    'warn',
    `PID 1 is ${init || 'unknown'}: kctl install needs systemd; running kctl in the foreground works`,
  );
}

export async function hostChecks(o: HostCheckOptions): Promise<Check[]> {
  return [
    kernel(),
    ...(await modules(o.role)),
    await cgroups(o.role),
    ...executables(o.role),
    ...(await ports(o)),
    ...(await disk(o)),
    await memory(o.role),
    await ipForward(o.role),
    await kernelLimits(),
    clock(),
    await systemd(),
  ];
}

/** The failed checks as the one line kctl refuses with. */
export function failureLine(checks: Check[]): string | undefined {
  const failed = checks.filter((c) => c.result === 'fail');
  return failed.length ? `host check failed: ${failed.map((c) => `${c.name}: ${c.detail}`).join('; ')}` : undefined;
}

/** Pids recorded in the run dir's pid files: kctl's own children from an earlier run. */
export async function ownPids(runDir: string): Promise<Set<number>> {
  const files = (await readdir(runDir).catch(() => [] as string[])).filter((f) => f.endsWith('.pid'));
  const pids = await Promise.all(files.map((f) => readPidFile(join(runDir, f)).catch(() => undefined)));
  return new Set(pids.filter((p): p is number => p !== undefined));
}

/** Runs the checks and refuses with their failure line (before a role touches anything). */
export async function requireHost(o: HostCheckOptions): Promise<Check[]> {
  const checks = await hostChecks(o);
  const line = failureLine(checks);
  if (line) throw new UserError(`${line}; kctl sysinfo --role ${o.role} shows every check`);
  return checks;
}
