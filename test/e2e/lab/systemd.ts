// A real systemd for unit tests of `kctl install`: systemd runs as PID 1 of its own pid, mount,
// uts and cgroup namespaces (inside a lab host's network namespace), so units can be installed,
// started, crashed and stopped without touching the host's systemd state.
//
// What keeps it from touching the host: none of the distribution's units exist for it. Its unit
// search path is a directory of empty stand-in targets (plus journald, for `journalctl -u`) and
// its own /etc/systemd/system; /run, /tmp, /var/tmp, the journal and /etc/systemd/system are
// fresh tmpfs mounts in its private mount namespace. So no boot service runs (nothing cleans
// /tmp, triggers devices or remounts anything), and the units a test writes vanish with it.
// The rest of the file system is the host's: kctl gets its own --data-dir and --run-dir, and
// files pass in from outside /tmp.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { chmod, mkdir, open, readFile, readdir, rm, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa, type Options, type Result } from 'execa';
import { errnoOf } from '../../../src/base/errors.ts';

const STATE = '/var/lib/kctl-test-systemd';
const SYSTEMD = '/lib/systemd/systemd';
/** What /proc/<pid>/exe says for it (/lib may be a link to /usr/lib). */
const SYSTEMD_EXE = existsSync(SYSTEMD) ? realpathSync(SYSTEMD) : SYSTEMD;
const NSENTER = '/usr/bin/nsenter';

export interface SystemdLab {
  readonly name: string;
  /** Host pid of the lab's systemd (PID 1 inside). */
  readonly pid: number;
  /** Runs a command inside the lab (its pid, mount, uts, cgroup and network namespaces); never rejects. */
  exec(cmd: string, args: string[], opts?: Options): Promise<Result>;
  /** Kills everything in the lab and removes its cgroups and state. Idempotent. */
  down(): Promise<void>;
}

const STUB_TARGETS = [
  'basic',
  'cryptsetup',
  'getty',
  'graphical',
  'local-fs',
  'multi-user',
  'network',
  'network-online',
  'network-pre',
  'nss-lookup',
  'paths',
  'remote-fs',
  'slices',
  'sockets',
  'swap',
  'time-set',
  'time-sync',
  'timers',
];
const STOP_TARGETS = ['shutdown', 'umount', 'final', 'reboot', 'poweroff', 'halt', 'exit', 'emergency', 'rescue'];
const JOURNALD = ['systemd-journald.service', 'systemd-journald.socket', 'systemd-journald-dev-log.socket'];

async function writeUnits(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  const unit = (name: string, lines: string[]) => writeFile(join(dir, name), `[Unit]\n${lines.join('\n')}\n`);
  await Promise.all([
    ...STUB_TARGETS.map((t) => unit(`${t}.target`, [`Description=test stand-in for ${t}.target`])),
    ...STOP_TARGETS.map((t) =>
      unit(`${t}.target`, [`Description=test stand-in for ${t}.target`, 'DefaultDependencies=no']),
    ),
    unit('sysinit.target', ['Description=test stand-in for sysinit.target', 'Wants=systemd-journald.service']),
    unit('default.target', ['Description=test default target', 'Wants=multi-user.target systemd-journald.service']),
    unit('system.slice', ['Description=test system slice', 'DefaultDependencies=no']),
  ]);
  for (const j of JOURNALD) {
    const src = join('/lib/systemd/system', j);
    if (existsSync(src)) await writeFile(join(dir, j), await readFile(src));
  }
}

/** For each cgroup hierarchy this process is in: the directory of its cgroup (the lab nests below it). */
function ownCgroupDirs(): string[] {
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8').split('\n');
  const mountOf = (controllers: string): string | undefined => {
    for (const m of mounts) {
      const [pre, post] = m.split(' - ');
      if (!pre || !post) continue;
      const [fstype, , opts] = post.split(' ');
      const target = pre.split(' ')[4];
      if (controllers === '' && fstype === 'cgroup2') return target;
      if (fstype === 'cgroup' && controllers !== '') {
        const want = controllers.split(',');
        const have = (opts ?? '').split(',');
        if (want.every((c) => have.includes(c))) return target;
      }
    }
    return undefined;
  };
  const out: string[] = [];
  for (const line of readFileSync('/proc/self/cgroup', 'utf8').split('\n').filter(Boolean)) {
    const [, controllers = '', path = '/'] = line.split(':');
    const mnt = mountOf(controllers);
    if (mnt && existsSync(join(mnt, path))) out.push(join(mnt, path));
  }
  return out;
}

/** Boots systemd in a lab host's network namespace and waits until it is running. */
export async function bootSystemd(
  name: string,
  netns: string,
  t?: { after: (fn: () => Promise<void>) => void },
): Promise<SystemdLab> {
  if (!existsSync(SYSTEMD))
    throw new Error(`${SYSTEMD} not found: the systemd tests need the systemd package installed (not running)`);
  const dir = join(STATE, name);
  await downByState(dir, name);
  await mkdir(dir, { recursive: true });
  const units = join(dir, 'units');
  await writeUnits(units);
  const cgroups = ownCgroupDirs().map((d) => join(d, `kctl-test-systemd-${name}`));
  await writeFile(join(dir, 'cgroups'), cgroups.join('\n') + '\n');
  // PID 1 of the new namespaces: private mounts first, then it becomes systemd.
  await writeFile(
    join(dir, 'boot'),
    `#!/bin/bash
set -e
mount --make-rprivate /
for d in /run /tmp /var/tmp /etc/systemd/system; do mount -t tmpfs -o mode=0755 kctl-test "$d"; done
chmod 1777 /tmp /var/tmp
if [ -d /var/log/journal ]; then mount -t tmpfs kctl-test /var/log/journal; fi
# The cgroup hierarchies as this cgroup namespace sees them (systemd's root is the lab's cgroup).
mount -t tmpfs -o mode=0755 cgroup /sys/fs/cgroup
for c in $(awk -F: '$2 != "" {print $2}' /proc/1/cgroup); do
  m=\${c#name=}; mkdir -p /sys/fs/cgroup/$m
  if [ "\${c#name=}" != "$c" ]; then mount -t cgroup -o none,$c cgroup /sys/fs/cgroup/$m; else mount -t cgroup -o $c cgroup /sys/fs/cgroup/$m; fi
done
if grep -q '^0::' /proc/1/cgroup; then mkdir -p /sys/fs/cgroup/unified; mount -t cgroup2 cgroup2 /sys/fs/cgroup/unified; fi
hostname kctl-test-${name}
# The kernel's log is the host's, shared by every lab: journald must not import it (its lines
# from other labs and earlier runs would read as this lab's), and systemd logs to the journal.
mkdir -p /run/systemd/journald.conf.d
printf '[Journal]\\nReadKMsg=no\\n' > /run/systemd/journald.conf.d/kctl-test.conf
export SYSTEMD_UNIT_PATH=${units}:/etc/systemd/system
exec ${SYSTEMD} --system --unit=default.target --log-target=journal-or-kmsg --log-level=notice </dev/null >>${dir}/systemd.log 2>&1
`,
  );
  await chmod(join(dir, 'boot'), 0o755);
  // The launcher moves itself into the lab's own cgroups before the cgroup namespace is made.
  await writeFile(
    join(dir, 'launch'),
    `#!/bin/bash
for g in ${cgroups.join(' ')}; do
  mkdir -p "$g"
  if [ -f "$g/../cpuset.cpus" ]; then cat "$g/../cpuset.cpus" > "$g/cpuset.cpus"; cat "$g/../cpuset.mems" > "$g/cpuset.mems"; fi
  echo $$ > "$g/cgroup.procs"
done
exec unshare --cgroup --pid --fork --mount --uts --propagation private --mount-proc ${join(dir, 'boot')}
`,
  );
  await chmod(join(dir, 'launch'), 0o755);
  const launchLog = await open(join(dir, 'launch.log'), 'w');
  const launcher = spawn(NSENTER, [`--net=/run/netns/${netns}`, join(dir, 'launch')], {
    detached: true,
    stdio: ['ignore', launchLog.fd, launchLog.fd],
  });
  launcher.unref();
  await launchLog.close();
  const logs = async () =>
    `launch: ${(await readFile(join(dir, 'launch.log'), 'utf8').catch(() => '')).trim()}\nsystemd: ${(await readFile(join(dir, 'systemd.log'), 'utf8').catch(() => '')).trim().split('\n').slice(-5).join('\n')}`;
  let pid: number | undefined;
  for (let i = 0; i < 100 && pid === undefined; i++) {
    pid = await systemdPidIn(cgroups[0]!);
    if (pid === undefined) await sleep(100);
  }
  if (pid === undefined) throw new Error(`systemd did not start in lab ${name}:\n${await logs()}`);
  await writeFile(join(dir, 'pid'), `${pid}\n`);
  const lab: SystemdLab = {
    name,
    pid,
    exec: (cmd, args, opts = {}) =>
      execa(NSENTER, ['-t', String(pid), '-m', '-p', '-u', '-C', '-n', '--', cmd, ...args], {
        reject: false,
        timeout: 300_000,
        ...opts,
      }) as Promise<Result>,
    down: () => downByState(dir, name),
  };
  t?.after(() => lab.down());
  let state = '';
  for (let i = 0; i < 100; i++) {
    state = String((await lab.exec('systemctl', ['is-system-running'])).stdout).trim();
    if (state === 'running' || state === 'degraded') return lab;
    await sleep(200);
  }
  throw new Error(`systemd in lab ${name} is not running (state ${state || '?'}):\n${await logs()}`);
}

/** Gives an installed unit a watchdog of `seconds` (a drop-in in the lab's /etc/systemd/system) and reloads systemd. */
export async function setWatchdog(lab: SystemdLab, unit: string, seconds: number): Promise<void> {
  const d = `/etc/systemd/system/${unit}.service.d`;
  const r = await lab.exec('sh', [
    '-c',
    `mkdir -p ${d} && printf "[Service]\\nWatchdogSec=${seconds}\\n" > ${d}/test.conf && systemctl daemon-reload`,
  ]);
  if (r.exitCode !== 0) throw new Error(`cannot set the watchdog of ${unit}: ${String(r.stderr).trim()}`);
}

/** The host pid of the systemd process in the lab's cgroup tree (its PID 1). */
async function systemdPidIn(cgroup: string): Promise<number | undefined> {
  const pids = await readdir(cgroup, { recursive: true })
    .then((entries) => entries.filter((e) => e.endsWith('cgroup.procs')))
    .catch(() => [] as string[]);
  for (const f of ['cgroup.procs', ...pids]) {
    const text = await readFile(join(cgroup, f), 'utf8').catch(() => '');
    for (const p of text.split('\n').filter(Boolean)) {
      const exe = await execa('readlink', [`/proc/${p}/exe`], { reject: false });
      if (String(exe.stdout) === SYSTEMD_EXE) return Number(p);
    }
  }
  return undefined;
}

async function downByState(dir: string, name: string): Promise<void> {
  const pid = Number((await readFile(join(dir, 'pid'), 'utf8').catch(() => '')).trim());
  if (pid > 1) {
    const exe = await execa('readlink', [`/proc/${pid}/exe`], { reject: false });
    if (String(exe.stdout) === SYSTEMD_EXE) {
      // PID 1 of a pid namespace: killing it kills every process in the namespace.
      process.kill(pid, 'SIGKILL');
      for (let i = 0; i < 100 && existsSync(`/proc/${pid}`); i++) await sleep(100);
    }
  }
  const cgroups = (await readFile(join(dir, 'cgroups'), 'utf8').catch(() => ''))
    .split('\n')
    .filter((g) => g.endsWith(`/kctl-test-systemd-${name}`));
  for (const g of cgroups) await removeCgroupTree(g);
  await rm(dir, { recursive: true, force: true });
}

async function removeCgroupTree(dir: string): Promise<void> {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  for (const e of entries) if (e.isDirectory()) await removeCgroupTree(join(dir, e.name));
  for (let i = 0; i < 50; i++) {
    try {
      await rmdir(dir);
      return;
    } catch (err) {
      if (errnoOf(err) === 'ENOENT') return;
      await sleep(100); // processes leaving
    }
  }
}
