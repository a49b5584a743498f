// What the controller's status socket reports beyond every role's fields.
import type { ComponentStatus } from '../../base/component.ts';
import type { StatusReport } from '../../base/status-server.ts';
import { KCTL_VERSION } from '../../base/version.ts';
import type { KonnectivityServerSnapshot } from '../../konnectivity/index.ts';
import type { LiveController } from '../../kube/controller-leases.ts';
import type { AddressConflict, NodeCounts } from '../nodes/nodes.ts';
import type { RefusedPodRange } from '../../base/ownership.ts';
import type { KubeletServingStatus } from '../nodes/kubelet-serving.ts';
import type { BackupStatus } from '../backups/backup-schedule.ts';
import type { CertificateStatus } from '../../pki/index.ts';
import type { RenewalRun } from '../pki/pki-renewer.ts';
import type { StorageStatus } from '../components/storage.ts';
import type { FrontDoorReport } from '../components/front-door.ts';

export interface ControllerStatusReport extends StatusReport {
  role: 'controller';
  /** Which agents this konnectivity server holds ("No agent available" debugging). */
  konnectivity?: KonnectivityServerSnapshot;
  /** The live controllers of the cluster (their leases), this one included. */
  controllers?: LiveController[];
  /** Per agent (id), the controllers (lease names) whose konnectivity servers hold a stream from it. */
  agentServers?: { agent: string; servers: string[] }[];
  storage?: StorageStatus;
  /** The cluster's Nodes, Ready of all (a full cluster's controllers). */
  nodes?: NodeCounts;
  /** Addresses or names more than one Node reports, and the Node that keeps each (the first reporter). */
  addressConflicts?: AddressConflict[];
  /** Pod ranges Nodes hold that nothing is routed to (base/ownership.ts judgePodRanges), with why. */
  refusedPodRanges?: RefusedPodRange[];
  /** Which CAs kube-apiserver trusts for kubelets, and which nodes still serve a certificate of the cluster CA. */
  kubeletServing?: KubeletServingStatus;
  /** Scheduled backups (spec.backup.schedule): the last run, the next, who makes them. */
  backup?: BackupStatus;
  /** Every CA, leaf certificate and kubeconfig of this controller: expiry, next renewal, renewals seen. */
  certificates?: CertificateStatus[];
  /** The renewer's last runs that renewed something (in HA, controllers take turns: these never overlap). */
  pkiRenewals?: RenewalRun[];
  /** spec.frontDoor: this cluster's names on the host's shared port and this process's share of its traffic. */
  frontDoor?: FrontDoorReport;
}

/** What every controller's status report starts with: this process and its components. */
export function processReport(
  components: ComponentStatus[],
): Pick<ControllerStatusReport, 'role' | 'version' | 'pid' | 'uptimeSeconds' | 'components'> {
  return {
    role: 'controller',
    version: KCTL_VERSION,
    pid: process.pid,
    uptimeSeconds: Math.round(process.uptime()),
    components,
  };
}
