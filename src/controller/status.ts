// What the controller's status socket reports beyond every role's fields.
import type { StatusReport } from '../base/status-server.ts';
import type { KonnectivityServerSnapshot } from '../konnectivity/index.ts';
import type { LiveController } from '../kube/controller-leases.ts';

export interface ControllerStatusReport extends StatusReport {
  role: 'controller';
  /** Which agents this konnectivity server holds ("No agent available" debugging). */
  konnectivity?: KonnectivityServerSnapshot;
  /** The live controllers of the cluster (their leases), this one included. */
  controllers?: LiveController[];
}
