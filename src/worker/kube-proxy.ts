// kube-proxy in iptables mode with the node's own credentials (the controller binds
// system:node-proxier to group system:nodes). Metrics and healthz on loopback only, and no
// change to host-global conntrack limits.
import { writeFileAtomic } from '../base/fs.ts';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { probeOnce } from '../base/probe.ts';
import { componentFlags } from '../base/argv.ts';
import type { ComponentContext } from '../base/component.ts';
import { Supervisor } from '../supervisor/process.ts';
import type { WorkerPaths } from './paths.ts';

export const KUBE_PROXY_HEALTHZ_PORT = 10256;
export const KUBE_PROXY_METRICS_PORT = 10249;

export interface KubeProxyOptions {
  paths: WorkerPaths;
  nodeName: string;
  /** The cluster's pod network (spec.network.podCIDR), for telling pod traffic from outside traffic. */
  clusterCIDR: string;
  /** Extra kube-proxy flags (name without dashes -> value). */
  extraArgs?: Record<string, string>;
}

export function kubeProxyConfiguration(o: KubeProxyOptions): Record<string, unknown> {
  return {
    apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
    kind: 'KubeProxyConfiguration',
    mode: 'iptables',
    clusterCIDR: o.clusterCIDR,
    hostnameOverride: o.nodeName,
    bindAddress: '0.0.0.0',
    clientConnection: { kubeconfig: o.paths.kubeletKubeconfig },
    // maxPerCore 0 / min 0: leave nf_conntrack_max (global, not per network namespace) alone.
    conntrack: { maxPerCore: 0, min: 0 },
    metricsBindAddress: `127.0.0.1:${KUBE_PROXY_METRICS_PORT}`,
    healthzBindAddress: `127.0.0.1:${KUBE_PROXY_HEALTHZ_PORT}`,
    iptables: { syncPeriod: '30s', minSyncPeriod: '1s' },
    // NodePorts on the node's primary addresses only, not on every local IP (kube-proxy's advice).
    nodePortAddresses: ['primary'],
  };
}

/** The program: its binary in <bin>, its pid file in <run>, its component's name. */
export const KUBE_PROXY = 'kube-proxy';

export class KubeProxyComponent extends Supervisor {
  readonly readyTimeoutMs = 120_000;
  private readonly popts: KubeProxyOptions;

  constructor(opts: KubeProxyOptions) {
    const { paths } = opts;
    super({
      name: KUBE_PROXY,
      binary: join(paths.binDir, KUBE_PROXY),
      args: componentFlags({ config: paths.kubeProxyConfig }, opts.extraArgs),
      runDir: paths.runDir,
      // 200 once the first full sync of the rules is done.
      ready: () => probeOnce({ url: `http://127.0.0.1:${KUBE_PROXY_HEALTHZ_PORT}/healthz` }),
      readyRetryMs: 1000,
    });
    this.popts = opts;
  }

  override async init(ctx?: ComponentContext): Promise<void> {
    await super.init(ctx);
    const file = this.popts.paths.kubeProxyConfig;
    await writeFileAtomic(file, stringify(kubeProxyConfiguration(this.popts)), 0o600);
  }
}
