// kube-scheduler and kube-controller-manager: own kubeconfigs, leader election, loopback-only
// secure ports (configurable so several controllers can share a host in tests).
import { componentFlags, type FlagValue } from '../base/argv.ts';
import { join } from 'node:path';
import type { Logger } from '../base/log.ts';
import type { PkiPaths } from '../pki/index.ts';
import { Supervisor } from '../supervisor/process.ts';
import type { ClusterConfig } from './config.ts';
import type { ControllerPaths } from './paths.ts';
import { httpsReady } from '../base/probe.ts';
import { goMemoryLimit } from './apiserver.ts';

export function schedulerArgs(cfg: ClusterConfig, pki: PkiPaths): string[] {
  return componentFlags(
    {
      kubeconfig: pki.schedulerConf,
      'authentication-kubeconfig': pki.schedulerConf,
      'authorization-kubeconfig': pki.schedulerConf,
      'leader-elect': true,
      'bind-address': '127.0.0.1',
      'secure-port': cfg.spec.scheduler.port,
      profiling: false,
    },
    cfg.spec.scheduler.extraArgs,
  );
}

/**
 * The controllers an api-only control plane runs: namespaces and garbage collection, service
 * accounts and their tokens, aggregated cluster roles, and the root CA ConfigMap in every namespace.
 */
export const API_ONLY_CONTROLLERS = [
  'clusterrole-aggregation',
  'garbagecollector',
  'namespace',
  'serviceaccount',
  'serviceaccount-token',
  'root-ca-cert-publisher',
];

export function controllerManagerArgs(cfg: ClusterConfig, pki: PkiPaths): string[] {
  const nodes: Record<string, FlagValue> =
    cfg.spec.profile === 'api-only'
      ? // One controller-manager, no nodes: nothing to elect, sign or allocate.
        { 'leader-elect': false, controllers: API_ONLY_CONTROLLERS.join(',') }
      : {
          'leader-elect': true,
          // One signer each: kubelet serving certificates come from their own CA, which nothing
          // but kubelet's clients trusts; every other signer uses the cluster CA.
          'cluster-signing-kubelet-serving-cert-file': pki.kubeletServingCaCert,
          'cluster-signing-kubelet-serving-key-file': pki.kubeletServingCaKey,
          'cluster-signing-kubelet-client-cert-file': pki.caCert,
          'cluster-signing-kubelet-client-key-file': pki.caKey,
          'cluster-signing-kube-apiserver-client-cert-file': pki.caCert,
          'cluster-signing-kube-apiserver-client-key-file': pki.caKey,
          'cluster-signing-legacy-unknown-cert-file': pki.caCert,
          'cluster-signing-legacy-unknown-key-file': pki.caKey,
          'allocate-node-cidrs': true,
          'cluster-cidr': cfg.spec.network.podCIDR,
          'service-cluster-ip-range': cfg.spec.network.serviceCIDR,
          'node-cidr-mask-size': 24,
          controllers: '*,bootstrapsigner,tokencleaner',
        };
  return componentFlags(
    {
      kubeconfig: pki.controllerManagerConf,
      'authentication-kubeconfig': pki.controllerManagerConf,
      'authorization-kubeconfig': pki.controllerManagerConf,
      'bind-address': '127.0.0.1',
      'secure-port': cfg.spec.controllerManager.port,
      'root-ca-file': pki.caCert,
      'service-account-private-key-file': pki.saKey,
      'use-service-account-credentials': true,
      ...nodes,
      profiling: false,
    },
    cfg.spec.controllerManager.extraArgs,
  );
}

export class SchedulerComponent extends Supervisor {
  constructor(cfg: ClusterConfig, paths: ControllerPaths, pki: PkiPaths, log: Logger) {
    super({
      name: 'kube-scheduler',
      binary: join(paths.binDir, 'kube-scheduler'),
      args: schedulerArgs(cfg, pki),
      runDir: paths.runDir,
      log,
      ready: httpsReady({ url: `https://127.0.0.1:${cfg.spec.scheduler.port}/healthz` }, 'kube-scheduler'),
    });
  }
}

export class ControllerManagerComponent extends Supervisor {
  constructor(cfg: ClusterConfig, paths: ControllerPaths, pki: PkiPaths, log: Logger) {
    super({
      name: 'kube-controller-manager',
      binary: join(paths.binDir, 'kube-controller-manager'),
      args: controllerManagerArgs(cfg, pki),
      env: goMemoryLimit(cfg.spec.controllerManager.memoryLimit),
      runDir: paths.runDir,
      log,
      ready: httpsReady({ url: `https://127.0.0.1:${cfg.spec.controllerManager.port}/healthz` }, 'kube-controller-manager'),
    });
  }
}
