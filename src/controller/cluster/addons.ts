// kctl's own add-ons are stacks it writes under <data-dir>/manifests/ at every start, for the
// manifest applier to apply: an enabled add-on's file is (re)written, a disabled add-on's stack
// directory is removed, and the applier then prunes its objects. Operators change add-ons in the
// config (spec.addons), not in these files: kctl rewrites them.
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { removeTree, writeFileAtomic } from '../../base/fs.ts';
import type { Logger } from '../../base/log.ts';
import type { KubeManifest } from '../../kube/client.ts';
import type { PkiPaths } from '../../pki/index.ts';
import type { ClusterConfig } from '../config/config.ts';
import { corednsObjects } from './coredns.ts';
import { metricsServerObjects } from './metrics-server.ts';

export const ADDON_STACKS = { coredns: 'coredns', metricsServer: 'metrics-server' } as const;

interface Addon {
  stack: string;
  enabled: boolean;
  objects: () => Promise<KubeManifest[]>;
}

function addons(cfg: ClusterConfig, pki: PkiPaths): Addon[] {
  const { addons: a, network } = cfg.spec;
  return [
    {
      stack: ADDON_STACKS.coredns,
      enabled: a.coredns.enabled,
      objects: async () => corednsObjects({ clusterDomain: network.clusterDomain, clusterDNS: network.clusterDNS }),
    },
    {
      stack: ADDON_STACKS.metricsServer,
      enabled: a.metricsServer.enabled,
      objects: async () =>
        metricsServerObjects({
          caPem: await readFile(pki.addonsCaCert, 'utf8'),
          certPem: await readFile(pki.metricsServerCert, 'utf8'),
          keyPem: await readFile(pki.metricsServerKey, 'utf8'),
          kubeletCaPem: await readFile(pki.kubeletCaBundle, 'utf8'),
        }),
    },
  ];
}

/** Writes the enabled add-ons' stacks and removes the disabled ones'. */
export async function writeAddonStacks(
  cfg: ClusterConfig,
  manifestsDir: string,
  pki: PkiPaths,
  log: Logger,
): Promise<void> {
  for (const addon of addons(cfg, pki)) {
    const dir = join(manifestsDir, addon.stack);
    if (!addon.enabled) {
      if ((await removeTree(dir)).length)
        log.info({ stack: addon.stack }, `add-on ${addon.stack} disabled in the config: its stack is removed`);
      continue;
    }
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const text = (await addon.objects()).map((o) => stringify(o)).join('---\n');
    // 0600: a stack may carry a private key (metrics-server's serving key).
    await writeFileAtomic(
      join(dir, `${addon.stack}.yaml`),
      `# Written by kctl at every start; change spec.addons in the config instead.\n${text}`,
      0o600,
    );
  }
}
