// kube-scheduler and kube-controller-manager: own kubeconfigs, leader election, loopback-only
// secure ports (configurable so several controllers can share a host in tests).
import { componentFlags } from '../base/argv.ts';
import { join } from 'node:path';
import type { Logger } from '../base/log.ts';
import type { PkiPaths } from '../pki/index.ts';
import { Supervisor } from '../supervisor/process.ts';
import type { ClusterConfig } from './config.ts';
import type { ControllerPaths } from './paths.ts';
import { httpsReady } from '../base/probe.ts';

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

export function controllerManagerArgs(cfg: ClusterConfig, pki: PkiPaths): string[] {
  return componentFlags(
    {
      kubeconfig: pki.controllerManagerConf,
      'authentication-kubeconfig': pki.controllerManagerConf,
      'authorization-kubeconfig': pki.controllerManagerConf,
      'leader-elect': true,
      'bind-address': '127.0.0.1',
      'secure-port': cfg.spec.controllerManager.port,
      'cluster-signing-cert-file': pki.caCert,
      'cluster-signing-key-file': pki.caKey,
      'root-ca-file': pki.caCert,
      'service-account-private-key-file': pki.saKey,
      'use-service-account-credentials': true,
      'allocate-node-cidrs': true,
      'cluster-cidr': cfg.spec.network.podCIDR,
      'service-cluster-ip-range': cfg.spec.network.serviceCIDR,
      'node-cidr-mask-size': 24,
      controllers: '*,bootstrapsigner,tokencleaner',
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
      runDir: paths.runDir,
      log,
      ready: httpsReady({ url: `https://127.0.0.1:${cfg.spec.controllerManager.port}/healthz` }, 'kube-controller-manager'),
    });
  }
}
