// kctl cluster: the clusters a management cluster hosts (KctlCluster objects, src/operator/),
// seen from outside: `list` with each one's readiness, profile, version, nodes and endpoint, and
// `token` for a worker of a hosted full cluster. Both speak to the management cluster with a
// kubeconfig: --kubeconfig, else $KUBECONFIG, else this host's admin kubeconfig (a kctl
// management cluster's controller host).
import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { UserError } from '../base/errors.ts';
import { parseExpiry, parseUses } from '../controller/join/tokens.ts';
import { NODE_NAME } from '../controller/join/worker-tokens.ts';
import { KubeClient } from '../kube/client.ts';
import { hostedWorkerToken, listClusters } from '../operator/hosted.ts';
import type { KctlCluster } from '../operator/objects.ts';
import { globals } from './support/globals.ts';
import { outputOption, printJson, renderTable, type OutputFormat } from './support/output.ts';

export interface ClusterListEntry {
  namespace: string;
  name: string;
  /** True, False, or Unknown before the operator looked at it. */
  ready: string;
  /** The Ready condition's reason and message. */
  reason?: string;
  message?: string;
  profile: 'full' | 'api-only';
  /** What its spec asks for, and what every pod runs (once rolled). */
  wantVersion: string;
  version?: string;
  /** The Kubernetes its kube-apiserver runs (once rolled). */
  kubernetesVersion?: string;
  nodes?: { ready: number; total: number };
  /** Control-plane pods: ready, and how many its spec asks for. */
  pods?: { ready: number; wanted: number };
  endpoint?: string;
  kubeconfigSecret?: string;
  caNotAfter?: string;
}

function managementClient(cmd: Command, kubeconfig?: string): KubeClient {
  const file = kubeconfig ?? process.env.KUBECONFIG ?? join(globals(cmd).dataDir, 'pki', 'admin.conf');
  if (!existsSync(file))
    throw new UserError(
      `no kubeconfig for the management cluster at ${file}; give --kubeconfig FILE (or set KUBECONFIG)`,
    );
  return KubeClient.fromKubeconfig(file);
}

export function clusterEntry(c: KctlCluster): ClusterListEntry {
  const s = (c.status ?? {}) as {
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
    version?: string;
    kubernetesVersion?: string;
    nodes?: number;
    nodesReady?: number;
    replicas?: number;
    readyReplicas?: number;
    endpoint?: string;
    kubeconfigSecret?: string;
    caNotAfter?: string;
  };
  const ready = s.conditions?.find((x) => x.type === 'Ready');
  return {
    namespace: c.metadata.namespace,
    name: c.metadata.name,
    ready: ready?.status ?? 'Unknown',
    ...(ready?.reason ? { reason: ready.reason, message: ready.message } : {}),
    profile: c.spec.config?.profile === 'api-only' ? 'api-only' : 'full',
    wantVersion: c.spec.version,
    ...(s.version ? { version: s.version } : {}),
    ...(s.kubernetesVersion ? { kubernetesVersion: s.kubernetesVersion } : {}),
    ...(s.nodes !== undefined ? { nodes: { ready: s.nodesReady ?? 0, total: s.nodes } } : {}),
    ...(s.replicas !== undefined ? { pods: { ready: s.readyReplicas ?? 0, wanted: s.replicas } } : {}),
    ...(s.endpoint ? { endpoint: s.endpoint } : {}),
    ...(s.kubeconfigSecret ? { kubeconfigSecret: s.kubeconfigSecret } : {}),
    ...(s.caNotAfter ? { caNotAfter: s.caNotAfter } : {}),
  };
}

/** The table `kctl cluster list` prints. */
export function clusterTable(list: ClusterListEntry[]): string[] {
  const rows = list.map((e) => [
    e.namespace,
    e.name,
    e.ready === 'True' || !e.reason ? e.ready : `${e.ready} (${e.reason})`,
    e.profile,
    e.version && e.version === e.wantVersion ? e.version : `${e.version ?? '-'} -> ${e.wantVersion}`,
    e.kubernetesVersion ?? '-',
    e.pods ? `${e.pods.ready}/${e.pods.wanted}` : '-',
    e.nodes ? `${e.nodes.ready}/${e.nodes.total}` : '-',
    e.endpoint ?? '-',
  ]);
  return renderTable(
    ['NAMESPACE', 'NAME', 'READY', 'PROFILE', 'VERSION', 'KUBERNETES', 'PODS', 'NODES', 'ENDPOINT'],
    rows,
  );
}

const kubeconfigOption = [
  '--kubeconfig <file>',
  "the management cluster's kubeconfig (default $KUBECONFIG, else this host's admin kubeconfig)",
] as const;

export function clusterCommand(program: Command): void {
  const cluster = program
    .command('cluster')
    .description('clusters hosted on a management cluster (KctlCluster objects, run by kctl operator)');
  cluster
    .command('list')
    .description(
      'every hosted cluster: Ready (or why not), profile, kctl version (and the one it rolls to), the Kubernetes it runs, control-plane pods ready/wanted, nodes Ready/total, endpoint',
    )
    .option('-n, --namespace <ns>', 'one namespace only (default: all)')
    .option(...kubeconfigOption)
    .addOption(outputOption())
    .action(async (o: { namespace?: string; kubeconfig?: string; output: OutputFormat }, cmd: Command) => {
      const items = await listClusters(managementClient(cmd, o.kubeconfig), o.namespace);
      const list = items.map(clusterEntry);
      if (o.output === 'json') return printJson(list);
      if (list.length === 0) {
        process.stdout.write(
          'no KctlCluster objects; `kctl operator crd` and `kctl operator manifests` set the operator up\n',
        );
        return;
      }
      process.stdout.write(clusterTable(list).join('\n') + '\n');
    });
  cluster
    .command('token <name>')
    .description(
      'print a worker join token for hosted full cluster NAME (for `kctl worker --token-file`), naming the address and ports its exposure gives',
    )
    .option('-n, --namespace <ns>', "the cluster's namespace", 'default')
    .option('--expiry <duration>', 'lifetime, e.g. 30m, 24h, 7d; 0 = never', '24h')
    .option('--uses <n>', 'joins the token allows, then it is deleted (default unlimited)')
    .option('--node-name <name>', 'the only node name the token may join as')
    .option(...kubeconfigOption)
    .action(
      async (
        name: string,
        o: { namespace: string; expiry: string; uses?: string; nodeName?: string; kubeconfig?: string },
        cmd: Command,
      ) => {
        if (o.nodeName !== undefined && !NODE_NAME.test(o.nodeName))
          throw new UserError(
            `--node-name "${o.nodeName}" is not a node name; use lower-case letters, digits, '-' and '.'`,
          );
        const token = await hostedWorkerToken(
          managementClient(cmd, o.kubeconfig),
          { namespace: o.namespace, name },
          {
            expiryMs: parseExpiry(o.expiry),
            ...(o.uses !== undefined ? { uses: parseUses(o.uses) } : {}),
            ...(o.nodeName !== undefined ? { nodeName: o.nodeName } : {}),
          },
        );
        process.stdout.write(token + '\n');
      },
    );
}
