import type { Command } from 'commander';
import { readFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import { runWorker } from '../worker/index.ts';
import { hideFromCommandLine } from '../base/command-line.ts';
import { UserError } from '../base/errors.ts';
import { globals, loggerFor } from './support/globals.ts';
import { PROFILE_NAME } from '../kube/worker-profiles.ts';

/** commander collector for repeatable, comma-separable list flags (--labels, --taints). */
export const collect = (v: string, prev: string[]) => [...prev, ...v.split(',').filter(Boolean)];

/** The join token from --token-file, or one line saying why it cannot be read. */
export async function readTokenFile(file: string): Promise<string> {
  return readFile(file, 'utf8').catch((err: NodeJS.ErrnoException) => {
    throw new UserError(`--token-file ${file}: cannot read (${err.code ?? err.message})`);
  });
}

/** --node-name and --node-ip, checked the same way by kctl worker and kctl install worker. */
export function checkNodeFlags(f: { nodeName?: string; nodeIp?: string; profile?: string }): void {
  if (f.profile !== undefined && !PROFILE_NAME.test(f.profile))
    throw new UserError(`--profile "${f.profile}" is not a profile name (a DNS label, such as edge-small)`);
  if (f.nodeIp && isIP(f.nodeIp) === 0) throw new UserError(`--node-ip "${f.nodeIp}" is not an IP address`);
  if (f.nodeName && !/^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$/.test(f.nodeName))
    throw new UserError(`--node-name "${f.nodeName}" is not a valid node name (lowercase letters, digits, - and .)`);
}

export function parseLabels(items: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const item of items) {
    const m = /^([A-Za-z0-9./_-]+)=([A-Za-z0-9._-]*)$/.exec(item);
    if (!m) throw new UserError(`--labels "${item}" is not key=value (letters, digits, . _ - /)`);
    out[m[1]!] = m[2]!;
  }
  return out;
}

export function parseTaints(items: string[]): string[] {
  for (const t of items) {
    if (!/^[A-Za-z0-9./_-]+(=[A-Za-z0-9._-]*)?:(NoSchedule|PreferNoSchedule|NoExecute)$/.test(t)) {
      throw new UserError(`--taints "${t}" is not key[=value]:NoSchedule|PreferNoSchedule|NoExecute`);
    }
  }
  return items;
}

interface WorkerFlags {
  token?: string;
  tokenFile?: string;
  labels: string[];
  taints: string[];
  nodeName?: string;
  nodeIp?: string;
  networkRelay?: boolean;
  profile?: string;
}

/** --profile's help, for kctl worker and kctl install worker. */
export const PROFILE_HELP =
  "the cluster's worker profile (spec.workerProfiles) whose kubelet settings this node runs; default: the profile named default, if any";

export function workerCommand(program: Command): void {
  program
    .command('worker')
    .description('run a node: containerd, kubelet, kube-proxy and the konnectivity agent, joined with a token')
    .option(
      '--token-file <file>',
      'file with the join token from `kctl token create --role worker` (needed only the first time)',
    )
    .option(
      '--token <token>',
      'the join token itself; other users see it (ps) until kctl hides it: prefer --token-file',
    )
    .option('--labels <k=v>', 'node labels (repeat or comma-separate)', collect, [])
    .option('--taints <key=value:Effect>', 'node taints (repeat or comma-separate)', collect, [])
    .option('--node-name <name>', 'node name (default: host name)')
    .option('--node-ip <ip>', "node address (default: this host's address towards the API server)")
    .option('--profile <name>', PROFILE_HELP)
    .option(
      '--network-relay',
      'in wireguard mode, carry pod traffic between nodes that cannot reach each other (both behind NAT); give it to nodes with a reachable address',
    )
    .addHelpText(
      'after',
      "\nThe worker dials out only: to the API server and to every controller's konnectivity port.\nkubectl logs / exec / port-forward reach this node through that tunnel.",
    )
    .action(async (f: WorkerFlags, cmd: Command) => {
      if (f.token) hideFromCommandLine(f.token);
      const g = globals(cmd);
      if (g.tenant)
        throw new UserError('--name names a tenant control plane (kctl controller --name); a worker takes --node-name');
      if (f.token && f.tokenFile) throw new UserError('pass --token or --token-file, not both');
      const token = f.tokenFile ? await readTokenFile(f.tokenFile) : f.token;
      checkNodeFlags(f);
      await runWorker(
        {
          token: token?.trim(),
          dataDir: g.dataDir,
          runDir: g.runDir,
          nodeName: f.nodeName,
          nodeIp: f.nodeIp,
          labels: parseLabels(f.labels),
          taints: parseTaints(f.taints),
          networkRelay: f.networkRelay,
          profile: f.profile,
        },
        loggerFor(cmd),
      );
    });
}
