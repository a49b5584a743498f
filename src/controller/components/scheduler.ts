// kube-scheduler: its own kubeconfig, leader election, a loopback-only secure port (configurable
// so several controllers can share a host in tests).
import { componentFlags } from '../../base/argv.ts';
import { join } from 'node:path';
import type { PkiPaths } from '../../pki/index.ts';
import { KUBE_APISERVER } from './apiserver.ts';
import { Supervisor } from '../../supervisor/process.ts';
import type { ClusterConfig } from '../config/config.ts';
import type { ControllerPaths } from '../config/paths.ts';
import { httpsReady } from '../../base/probe.ts';
import { goRuntimeEnv } from './go-runtime.ts';

/** The program: its binary in <bin>, its pid file in <run>, its component's name. */
export const KUBE_SCHEDULER = 'kube-scheduler';

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

export class SchedulerComponent extends Supervisor {
  // It needs only the API, not kctl's bootstrap objects or add-ons: it starts beside those.
  readonly startAfter = KUBE_APISERVER;

  constructor(cfg: ClusterConfig, paths: ControllerPaths, pki: PkiPaths) {
    super({
      name: KUBE_SCHEDULER,
      binary: join(paths.binDir, KUBE_SCHEDULER),
      args: schedulerArgs(cfg, pki),
      env: goRuntimeEnv(cfg),
      runDir: paths.runDir,
      ready: httpsReady({ url: `https://127.0.0.1:${cfg.spec.scheduler.port}/healthz` }, KUBE_SCHEDULER),
    });
  }
}
