// The node's half of the pod network that CNI plugins apply: the bridge config for this node's
// pod CIDR (containerd reads it from the CNI conf dir), and the masquerade rule for pod traffic
// that leaves the cluster.
import { existsSync } from 'node:fs';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { Logger } from '../base/log.ts';
import { iptables } from '../host/ip.ts';
import type { WorkerPaths } from './paths.ts';

export const CNI_BRIDGE = 'kctl0';
export const CNI_NETWORK_NAME = 'kctl';
export const CNI_CONFLIST = '10-kctl.conflist';

/** The bridge for this node's pods; `mtu` when an overlay needs room for its headers (unset: the kernel's default). */
export function cniConflist(podCIDR: string, paths: WorkerPaths, mtu?: number): Record<string, unknown> {
  return {
    cniVersion: '1.0.0',
    name: CNI_NETWORK_NAME,
    plugins: [
      {
        type: 'bridge',
        bridge: CNI_BRIDGE,
        isGateway: true,
        // Not the bridge plugin's masquerade (it rewrites traffic to other nodes' pods too): kctl's
        // own rule masquerades only traffic that leaves the cluster CIDR (masqueradeRule).
        ipMasq: false,
        hairpinMode: true,
        ...(mtu ? { mtu } : {}),
        ipam: {
          type: 'host-local',
          ranges: [[{ subnet: podCIDR }]],
          routes: [{ dst: '0.0.0.0/0' }],
          dataDir: paths.cniStateDir,
        },
      },
      { type: 'portmap', capabilities: { portMappings: true }, snat: true },
    ],
  };
}

/** nat-table chain with kctl's masquerade rule; `kctl reset` removes it (and only it of the KCTL-* names). */
export const MASQ_CHAIN = 'KCTL-POSTROUTING';

/** The iptables rule (nat table) that makes this node's pods masquerade only outside the cluster CIDR. */
export function masqueradeRule(podCIDR: string, clusterCIDR: string): string[] {
  return [
    '-A',
    MASQ_CHAIN,
    '-s',
    podCIDR,
    '!',
    '-d',
    clusterCIDR,
    '-m',
    'comment',
    '--comment',
    'kctl: pods leaving the cluster CIDR',
    '-j',
    'MASQUERADE',
  ];
}

const nat = (args: string[]) => iptables('nat', args);

/** (Re)writes kctl's masquerade chain and hooks it into POSTROUTING once. */
export async function ensureMasquerade(podCIDR: string, clusterCIDR: string, log: Logger): Promise<void> {
  await nat(['-N', MASQ_CHAIN]); // exists already on a restart
  await nat(['-F', MASQ_CHAIN]);
  const rule = masqueradeRule(podCIDR, clusterCIDR);
  const added = await nat(rule);
  if (!added.ok) throw new Error(`iptables ${rule.join(' ')}: ${added.stderr}`);
  if (!(await nat(['-C', 'POSTROUTING', '-j', MASQ_CHAIN])).ok) {
    const r = await nat(['-A', 'POSTROUTING', '-j', MASQ_CHAIN]);
    if (!r.ok) throw new Error(`iptables -A POSTROUTING -j ${MASQ_CHAIN}: ${r.stderr}`);
  }
  log.info({ podCIDR, clusterCIDR }, 'pod traffic is masqueraded only when it leaves the cluster CIDR');
}

/**
 * Writes the CNI config so that containerd notices: its conf dir watcher ignores Create events
 * (a rename into the dir is one) and reloads on Write and Rename. A first config is written in
 * place (one small write: Create, then Write with the whole content); a changed one through a
 * temp file in the same dir (libcni skips *.tmp) renamed over it.
 */
export async function writeIfChanged(file: string, text: string, mode = 0o644): Promise<boolean> {
  if (!existsSync(file)) {
    await writeFile(file, text, { mode });
    return true;
  }
  if ((await readFile(file, 'utf8')) === text) return false;
  const tmp = join(dirname(file), `.${basename(file)}.tmp`);
  await writeFile(tmp, text, { mode });
  await rename(tmp, file);
  return true;
}
