// The test lab: "hosts" as network namespaces on one machine (test/README.md has the layout).
//
//   switch netns  kctl-<lab>-sw : bridge br0, one veth end per host (h0, h1, ...)
//   host netns    kctl-<lab>-<host> : eth0 = 10.77.<n>.<10+i>/24, lo up, ip_forward on,
//                 default route on-link via eth0 (nothing beyond the lab bridge)
//
// With `sites`, hosts sit in separate subnets (site s: bridge br<s>, 10.<77+s>.<n>.0/24) joined
// only by a router host with a leg in each (10.<77+s>.<n>.1) and no default route: it forwards
// between the sites' addresses and knows nothing else (no pod CIDRs).
//
// The bridge lives in its own namespace, so the lab adds no link, address or route to the
// machine's root namespace and deleting the namespaces removes every link with them. wan.ts may
// move a host's veth end from br0 behind a WAN emulator, also in the switch namespace (lab.sw).
// Commands enter a host with `nsenter --net=/run/netns/NAME` (not `ip netns exec`, which
// remounts /sys and hides the cgroup mounts kubelet and runc need).
import { alive } from '../../wait.ts';
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa, type Options, type Result } from 'execa';
import { ensureDebianPackages } from '../../../assets/debian.ts';

/** What the lab needs on the machine: ip, nsenter, iptables, and busybox for ping/nc. */
export const LAB_PACKAGES = [
  'iproute2',
  'util-linux',
  'iptables',
  'nftables',
  'busybox-static',
  'conntrack',
  'curl',
  // The HTTP proxy of the front-door proxy test: the program alone (the tinyproxy package would start a service).
  'tinyproxy-bin',
];
const NSENTER = '/usr/bin/nsenter';
const BUSYBOX = '/bin/busybox';
const ISOLATE_CHAIN = 'KCTL-LAB-ISOLATE';

export interface LabHost {
  readonly name: string;
  /** Network namespace name; the file is /run/netns/<netns>. */
  readonly netns: string;
  readonly ip: string;
  /** Runs a command to completion inside the host's network namespace (never rejects). */
  run(cmd: string, args: string[], opts?: Options): Promise<Result>;
  /** Starts a long-running process inside the host; the lab kills it (by pid) on destroy(). */
  spawn(cmd: string, args: string[], opts?: SpawnOptions): ChildProcess;
}

/**
 * The switch namespace, for lab tools that rewire a host's port (wan.ts puts a WAN emulator
 * between a host and br0); tests use the Lab's own methods.
 */
export interface LabSwitch {
  readonly netns: string;
  /** The switch's end of `host`'s veth (h<i>), a port of br0 unless a tool moved it. */
  port(host: LabHost): string;
  run(cmd: string, args: string[], opts?: Options): Promise<Result>;
  /** Like LabHost.spawn: destroy() kills it. */
  spawn(cmd: string, args: string[], opts?: SpawnOptions): ChildProcess;
  /** True once destroy() has begun: a lab process that ends then was ended by it. */
  readonly destroyed: boolean;
}

export interface Lab {
  readonly name: string;
  readonly subnet: string;
  readonly hosts: readonly LabHost[];
  readonly sw: LabSwitch;
  host(name: string): LabHost;
  /** On `worker`: drop NEW inbound connections (INPUT and FORWARD) from each of `from`; replies to worker-initiated ones still pass. */
  isolate(worker: LabHost, ...from: LabHost[]): Promise<void>;
  /** True when `from` can open a TCP connection to `to`'s address on `port` within `timeoutMs`. */
  canConnect(from: LabHost, to: LabHost | string, port: number, timeoutMs?: number): Promise<boolean>;
  /** True when `from` gets an ICMP echo reply from `to`. */
  ping(from: LabHost, to: LabHost | string): Promise<boolean>;
  /** Kills every process the lab started, deletes the namespaces (and with them the bridge and veths). Idempotent. */
  destroy(): Promise<void>;
}

function sh(cmd: string, args: string[], opts: Options = {}): Promise<Result> {
  return execa(cmd, args, { reject: false, timeout: 60_000, ...opts }) as Promise<Result>;
}

async function must(cmd: string, args: string[], opts: Options = {}): Promise<Result> {
  const r = await sh(cmd, args, opts);
  if (r.exitCode !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (${r.exitCode}): ${String(r.stderr).trim()}`);
  return r;
}

export function netnsName(lab: string, host: string): string {
  return `kctl-${lab}-${host}`;
}

/** The third octet of 10.77.X.0/24, derived from the lab name: two labs with different names rarely share one. */
function subnetOctet(lab: string): number {
  return 1 + (createHash('sha256').update(lab).digest()[0]! % 250);
}

async function labNamespaces(lab: string): Promise<string[]> {
  const r = await sh('ip', ['netns', 'list']);
  return String(r.stdout)
    .split('\n')
    .map((l) => l.split(' ')[0] ?? '')
    .filter((n) => n.startsWith(`kctl-${lab}-`));
}

/** Kills a process group we started (detached), then the pid itself, and waits for it to go. */
async function killTree(pid: number): Promise<void> {
  for (const target of [-pid, pid]) {
    try {
      process.kill(target, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  for (let i = 0; i < 50 && (await alive(pid)); i++) await sleep(100);
}

export interface LabOptions {
  /** Host name -> site number (absent: 0); every site but 0 is its own subnet, reached through `router`. */
  sites?: Record<string, number>;
  /** The host (in site 0) that routes between the sites. */
  router?: string;
  /**
   * Host name -> the site-0 host that is its NAT gateway. Such a host has no port on the switch:
   * it sits alone behind its gateway at NAT_HOST_IP (every NATed host has that same address, as
   * edge sites reuse one private range), and its gateway masquerades it to the gateway's address.
   */
  nat?: Record<string, string>;
}

/** The address of every host behind a NAT gateway (LabOptions.nat), and its gateway's inner address. */
export const NAT_HOST_IP = '192.168.77.10';
const NAT_GATEWAY_INNER_IP = '192.168.77.1';

/** Tests start a lab with startLab (lab-test.ts), which destroys it when the test ends, passed or failed. */
export async function createLab(name: string, hostNames: string[], opts: LabOptions = {}): Promise<Lab> {
  if (!/^[a-z0-9]{1,6}$/.test(name)) throw new Error(`lab name must be 1-6 characters [a-z0-9], got ${name}`);
  for (const h of hostNames) if (!/^[a-z0-9]{1,12}$/.test(h) || h === 'sw') throw new Error(`bad lab host name ${h}`);
  if (process.getuid?.() !== 0) throw new Error('the test lab needs root (network namespaces)');
  await ensureDebianPackages(LAB_PACKAGES);

  const octet = subnetOctet(name);
  const subnet = `10.77.${octet}.0/24`;
  const sw = netnsName(name, 'sw');
  const children = new Set<ChildProcess>();
  let destroyed = false;

  // A previous run that was killed hard may have left namespaces with our names.
  for (const ns of await labNamespaces(name)) await sh('ip', ['netns', 'del', ns]);

  /** run and spawn inside namespace `netns`. */
  const enter = (netns: string): Pick<LabHost, 'run' | 'spawn'> => {
    const into = ['--net=/run/netns/' + netns, '--'];
    return {
      run: (cmd, args, o = {}) => sh(NSENTER, [...into, cmd, ...args], o),
      spawn: (cmd, args, o = {}) => {
        if (destroyed) throw new Error(`lab ${name} is destroyed`);
        // Own process group, so destroy() also reaches what the process forks.
        const child = spawn(NSENTER, [...into, cmd, ...args], {
          stdio: ['ignore', 'pipe', 'pipe'],
          ...o,
          detached: true,
        });
        children.add(child);
        child.once('exit', () => children.delete(child));
        return child;
      },
    };
  };
  const siteOf = (host: string): number => opts.sites?.[host] ?? 0;
  const siteNet = (site: number): string => `10.${77 + site}.${octet}`;
  const otherSites = [...new Set(hostNames.map(siteOf))].filter((s) => s !== 0).sort((a, b) => a - b);
  if (otherSites.length && (!opts.router || !hostNames.includes(opts.router) || siteOf(opts.router) !== 0))
    throw new Error(`lab ${name}: hosts in sites other than 0 need a router host in site 0`);
  const gatewayOf = (host: string): string | undefined => opts.nat?.[host];
  for (const [host, gw] of Object.entries(opts.nat ?? {}))
    if (!hostNames.includes(host) || !hostNames.includes(gw) || siteOf(gw) !== 0 || gatewayOf(gw) || siteOf(host) !== 0)
      throw new Error(
        `lab ${name}: NATed host ${host} needs a gateway host in site 0 that is not NATed itself (got ${gw})`,
      );
  const hosts = hostNames.map((host, i): LabHost => ({
    name: host,
    netns: netnsName(name, host),
    ip: gatewayOf(host) ? NAT_HOST_IP : `${siteNet(siteOf(host))}.${10 + i}`,
    ...enter(netnsName(name, host)),
  }));
  const labSwitch: LabSwitch = {
    netns: sw,
    port(host) {
      const i = hosts.findIndex((h) => h.name === host.name);
      if (i < 0) throw new Error(`lab ${name} has no host ${host.name}`);
      return `h${i}`;
    },
    ...enter(sw),
    get destroyed() {
      return destroyed;
    },
  };

  const destroy = async (): Promise<void> => {
    destroyed = true;
    for (const child of [...children]) if (child.pid) await killTree(child.pid);
    children.clear();
    // Anything else still holding one of our namespaces (e.g. a daemon a test process forked).
    for (const ns of await labNamespaces(name)) {
      const r = await sh('ip', ['netns', 'pids', ns]);
      for (const pid of String(r.stdout).split('\n').filter(Boolean).map(Number)) await killTree(pid);
      await sh('ip', ['netns', 'del', ns]);
    }
  };

  try {
    await must('ip', ['netns', 'add', sw]);
    await must('ip', ['-n', sw, 'link', 'add', 'br0', 'type', 'bridge']);
    await must('ip', ['-n', sw, 'link', 'set', 'br0', 'up']);
    for (const site of otherSites) {
      await must('ip', ['-n', sw, 'link', 'add', `br${site}`, 'type', 'bridge']);
      await must('ip', ['-n', sw, 'link', 'set', `br${site}`, 'up']);
    }
    const router = hosts.find((h) => h.name === opts.router);
    for (const h of hosts) {
      await must('ip', ['netns', 'add', h.netns]);
      if (gatewayOf(h.name)) continue; // wired to its gateway below
      const port = labSwitch.port(h);
      const site = siteOf(h.name);
      await must('ip', ['-n', sw, 'link', 'add', port, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', h.netns]);
      await must('ip', ['-n', sw, 'link', 'set', port, 'master', `br${site}`, 'up']);
      await must('ip', ['-n', h.netns, 'link', 'set', 'lo', 'up']);
      await must('ip', ['-n', h.netns, 'addr', 'add', `${h.ip}/24`, 'dev', 'eth0']);
      await must('ip', ['-n', h.netns, 'link', 'set', 'eth0', 'up']);
      if (site !== 0) {
        await must('ip', ['-n', h.netns, 'route', 'add', 'default', 'via', `${siteNet(site)}.1`]);
      } else if (h !== router || !otherSites.length) {
        // A host has a default route; an on-link one keeps everything on the lab bridge (the switch
        // has no uplink), and lets kube-proxy's OUTPUT DNAT see Service IPs instead of ENETUNREACH.
        await must('ip', ['-n', h.netns, 'route', 'add', 'default', 'dev', 'eth0']);
        for (const other of otherSites)
          await must('ip', ['-n', h.netns, 'route', 'add', `${siteNet(other)}.0/24`, 'via', router!.ip]);
      }
      await must(NSENTER, ['--net=/run/netns/' + h.netns, '--', 'sh', '-c', 'echo 1 > /proc/sys/net/ipv4/ip_forward']);
    }
    // The router's legs into the other sites (r<site> on br<site>, eth<site> inside).
    for (const site of otherSites) {
      await must('ip', [
        '-n',
        sw,
        'link',
        'add',
        `r${site}`,
        'type',
        'veth',
        'peer',
        'name',
        `eth${site}`,
        'netns',
        router!.netns,
      ]);
      await must('ip', ['-n', sw, 'link', 'set', `r${site}`, 'master', `br${site}`, 'up']);
      await must('ip', ['-n', router!.netns, 'addr', 'add', `${siteNet(site)}.1/24`, 'dev', `eth${site}`]);
      await must('ip', ['-n', router!.netns, 'link', 'set', `eth${site}`, 'up']);
    }
    // NATed hosts: one veth to their gateway, which masquerades them out of its own eth0.
    for (const h of hosts) {
      const gw = hosts.find((x) => x.name === gatewayOf(h.name));
      if (!gw) continue;
      const inner = `n${labSwitch.port(h)}`;
      await must('ip', [
        '-n',
        gw.netns,
        'link',
        'add',
        inner,
        'type',
        'veth',
        'peer',
        'name',
        'eth0',
        'netns',
        h.netns,
      ]);
      await must('ip', ['-n', gw.netns, 'addr', 'add', `${NAT_GATEWAY_INNER_IP}/24`, 'dev', inner]);
      await must('ip', ['-n', gw.netns, 'link', 'set', inner, 'up']);
      await must(NSENTER, [
        '--net=/run/netns/' + gw.netns,
        '--',
        'iptables',
        '-w',
        '5',
        '-t',
        'nat',
        '-A',
        'POSTROUTING',
        '-s',
        `${NAT_HOST_IP}/32`,
        '-o',
        'eth0',
        '-j',
        'MASQUERADE',
      ]);
      await must('ip', ['-n', h.netns, 'link', 'set', 'lo', 'up']);
      await must('ip', ['-n', h.netns, 'addr', 'add', `${h.ip}/24`, 'dev', 'eth0']);
      await must('ip', ['-n', h.netns, 'link', 'set', 'eth0', 'up']);
      await must('ip', ['-n', h.netns, 'route', 'add', 'default', 'via', NAT_GATEWAY_INNER_IP]);
      await must(NSENTER, ['--net=/run/netns/' + h.netns, '--', 'sh', '-c', 'echo 1 > /proc/sys/net/ipv4/ip_forward']);
    }
  } catch (err) {
    await destroy();
    throw err;
  }

  const target = (to: LabHost | string) => (typeof to === 'string' ? to : to.ip);
  return {
    name,
    subnet,
    hosts,
    sw: labSwitch,
    host(n) {
      const h = hosts.find((x) => x.name === n);
      if (!h) throw new Error(`lab ${name} has no host ${n}`);
      return h;
    },
    async isolate(worker, ...from) {
      const ipt = (...a: string[]) => worker.run('iptables', ['-w', '5', ...a]);
      await ipt('-N', ISOLATE_CHAIN);
      await ipt('-F', ISOLATE_CHAIN);
      for (const source of from) {
        const add = await ipt(
          '-A',
          ISOLATE_CHAIN,
          '-s',
          source.ip,
          '-m',
          'conntrack',
          '--ctstate',
          'NEW',
          '-j',
          'DROP',
        );
        if (add.exitCode !== 0) throw new Error(`isolating ${worker.name} failed: ${String(add.stderr).trim()}`);
      }
      for (const chain of ['INPUT', 'FORWARD']) {
        if ((await ipt('-C', chain, '-j', ISOLATE_CHAIN)).exitCode !== 0) {
          const r = await ipt('-I', chain, '1', '-j', ISOLATE_CHAIN);
          if (r.exitCode !== 0) throw new Error(`isolating ${worker.name} failed: ${String(r.stderr).trim()}`);
        }
      }
    },
    async canConnect(from, to, port, timeoutMs = 3000) {
      // bash's /dev/tcp: no extra tool, and a refused or dropped connection both fail.
      const r = await from.run(
        'timeout',
        [String(timeoutMs / 1000), 'bash', '-c', `exec 3<>/dev/tcp/${target(to)}/${port}`],
        {
          timeout: timeoutMs + 5000,
        },
      );
      return r.exitCode === 0;
    },
    async ping(from, to) {
      const r = await from.run(BUSYBOX, ['ping', '-c', '1', '-W', '2', target(to)], { timeout: 10_000 });
      return r.exitCode === 0;
    },
    destroy,
  };
}

/** Namespaces of a lab that still exist (for tests asserting cleanup). */
export function labNamespacesLeft(name: string): Promise<string[]> {
  return labNamespaces(name);
}
