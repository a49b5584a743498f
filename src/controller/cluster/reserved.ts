// What no node may own, whatever its Node reports (base/ownership.ts ReservedSpace): every
// controller's addresses and names (this one's config and serving certificates, the others'
// leases) and the cluster's Service and pod networks. A node that owned one of them could get a
// serving certificate for it or draw kube-apiserver's dials to it.
import { readFileSync } from 'node:fs';
import { canonicalIdentifier, type ReservedSpace } from '../../base/ownership.ts';
import { controllerHosts, type LiveController } from '../../kube/controller-leases.ts';
import { parseCert, sansOf } from '../../pki/index.ts';
import type { ClusterConfig } from '../config/config.ts';
import { nodePodRangeBits } from '../components/controller-manager.ts';

/** The DNS names and IPs a certificate file names (its SANs), canonical; none when it cannot be read. */
export function certificateNames(file: string): string[] {
  try {
    return sansOf(parseCert(readFileSync(file, 'utf8'), file, 'it is read again at the next start')).map((san) =>
      canonicalIdentifier(san.slice(san.indexOf(':') + 1)),
    );
  } catch {
    return [];
  }
}

export interface ReservedSources {
  /** This controller's serving certificates (kube-apiserver, konnectivity): their SANs are its names. */
  certificates: string[];
  /** The live controllers, as their leases say now. */
  controllers: { liveControllers(): LiveController[] };
}

export function reservedSpace(cfg: ClusterConfig, sources: ReservedSources): ReservedSpace {
  let own: Set<string> | undefined; // read once, on the first question (the certificates exist by then)
  const ownNames = (): Set<string> =>
    (own ??= new Set(
      [cfg.spec.api.address, ...cfg.spec.api.sans, ...sources.certificates.flatMap(certificateNames)].map(
        canonicalIdentifier,
      ),
    ));
  return {
    isController(value: string): boolean {
      if (ownNames().has(value)) return true;
      return sources.controllers
        .liveControllers()
        .some((c) => controllerHosts(c).some((h) => canonicalIdentifier(h) === value));
    },
    serviceCIDRs: [cfg.spec.network.serviceCIDR],
    podCIDRs: [cfg.spec.network.podCIDR],
    podRangeBits: nodePodRangeBits(cfg),
    ...(cfg.spec.frontDoor.enabled ? { nodeLocal: cfg.spec.frontDoor.nodeLocalAddress } : {}),
  };
}
