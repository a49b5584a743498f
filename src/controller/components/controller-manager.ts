// kube-controller-manager: its own kubeconfig, leader election (none for api-only), the node
// and signing controllers a full cluster needs, a loopback-only secure port (configurable so
// several controllers can share a host in tests).
import { join } from 'node:path';
import { componentFlags, type FlagValue } from '../../base/argv.ts';
import { httpsReady } from '../../base/probe.ts';
import { NODE_POD_RANGE_BITS } from '../../base/ownership.ts';
import type { PkiPaths } from '../../pki/index.ts';
import { KUBE_APISERVER } from './apiserver.ts';
import { Supervisor } from '../../supervisor/process.ts';
import { leafValidityMs, type ClusterConfig } from '../config/config.ts';
import { goRuntimeEnv } from './go-runtime.ts';
import type { ControllerPaths } from '../config/paths.ts';

/** The program: its binary in <bin>, its pid file in <run>, its component's name. */
export const KUBE_CONTROLLER_MANAGER = 'kube-controller-manager';

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

/**
 * The prefix length of each node's pod range as kube-controller-manager will give it: kctl's
 * default, or what extraArgs set (the pod network and the tunnel refuse ranges of any other size).
 */
export function nodePodRangeBits(cfg: ClusterConfig): number {
  const extra = cfg.spec.controllerManager.extraArgs;
  const family = cfg.spec.network.podCIDR.includes(':') ? 'ipv6' : 'ipv4';
  const set =
    extra[`node-cidr-mask-size-${family}`] ??
    extra[`--node-cidr-mask-size-${family}`] ??
    extra['node-cidr-mask-size'] ??
    extra['--node-cidr-mask-size'];
  return set !== undefined && /^\d{1,3}$/.test(set) ? Number(set) : NODE_POD_RANGE_BITS;
}

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
          'cluster-signing-kubelet-client-cert-file': pki.caSigningCert,
          'cluster-signing-kubelet-client-key-file': pki.caKey,
          'cluster-signing-kube-apiserver-client-cert-file': pki.caSigningCert,
          'cluster-signing-kube-apiserver-client-key-file': pki.caKey,
          'cluster-signing-legacy-unknown-cert-file': pki.caSigningCert,
          'cluster-signing-legacy-unknown-key-file': pki.caKey,
          // Kubelet client and serving certificates live as long as kctl's own leaves.
          'cluster-signing-duration': `${Math.round(leafValidityMs(cfg) / 1000)}s`,
          'allocate-node-cidrs': true,
          'cluster-cidr': cfg.spec.network.podCIDR,
          'service-cluster-ip-range': cfg.spec.network.serviceCIDR,
          'node-cidr-mask-size': NODE_POD_RANGE_BITS,
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

export class ControllerManagerComponent extends Supervisor {
  // It needs only the API, not kctl's bootstrap objects or add-ons: it starts beside those.
  readonly startAfter = KUBE_APISERVER;

  constructor(cfg: ClusterConfig, paths: ControllerPaths, pki: PkiPaths) {
    super({
      name: KUBE_CONTROLLER_MANAGER,
      binary: join(paths.binDir, KUBE_CONTROLLER_MANAGER),
      args: controllerManagerArgs(cfg, pki),
      env: goRuntimeEnv(cfg, cfg.spec.controllerManager.memoryLimit),
      runDir: paths.runDir,
      ready: httpsReady(
        { url: `https://127.0.0.1:${cfg.spec.controllerManager.port}/healthz` },
        KUBE_CONTROLLER_MANAGER,
      ),
    });
  }
}
