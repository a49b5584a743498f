import type { Command } from 'commander';
import { stringify } from 'yaml';
import { messageOf, UserError } from '../base/errors.ts';
import { componentLogger } from '../base/log.ts';
import { runUntilSignal } from '../base/lifecycle.ts';
import { ComponentManager } from '../base/manager.ts';
import { credentialsFromKubeconfig, KubeClient } from '../kube/client.ts';
import { inClusterCredentials } from '../kube/server-leases.ts';
import { KCTL_VERSION } from '../base/version.ts';
import { kctlClusterCrd } from '../operator/crd.ts';
import { operatorManifests } from '../operator/install.ts';
import { OperatorComponent } from '../operator/index.ts';
import { runningRelease } from '../payload/payload.ts';
import { MANAGEMENT_DOOR_DEFAULTS, ManagementDoorComponent } from '../operator/door.ts';
import { parseDoorDomain, parseManagementDoor, type ManagementDoor } from '../operator/door-keys.ts';
import { loggerFor } from './support/globals.ts';

export function operatorCommand(program: Command): void {
  const op = program
    .command('operator')
    .description('clusters whose control planes run as pods on a management cluster, managed as KctlCluster objects');
  op.command('crd')
    .description(
      'print the KctlCluster CustomResourceDefinition (kubectl apply -f -): its spec.config has the fields of a ClusterConfig file, checked the same way',
    )
    .action(() => {
      process.stdout.write(stringify(kctlClusterCrd()));
    });
  op.command('manifests')
    .description(
      'print the operator for the management cluster (kubectl apply -f -): namespace kctl-system, its service account and RBAC, and a Deployment of the kctl image running `kctl operator run`; with --front-door-domain and --front-door-address, also the front door (`kctl operator door`) as a DaemonSet behind a Service of its own',
    )
    .option('--replicas <n>', 'operator pods (one acts at a time)', '2')
    .option(...DOOR_DOMAIN)
    .option(...DOOR_ADDRESS)
    .action((o: { replicas: string } & DoorFlags) => {
      const replicas = Number(o.replicas);
      if (!Number.isInteger(replicas) || replicas < 1 || replicas > 10)
        throw new UserError(`--replicas ${o.replicas}: expected a whole number from 1 to 10`);
      process.stdout.write(
        operatorManifests(KCTL_VERSION, replicas, doorOf(o))
          .map((m) => stringify(m))
          .join('---\n'),
      );
    });
  op.command('run')
    .description(
      'reconcile every KctlCluster of the management cluster into its control plane: a database on the PostgreSQL its datastore names, its CAs in a Secret (made once), a Deployment of the kctl image, a Service, an admin kubeconfig Secret, and its status; one replica acts (a leader Lease)',
    )
    .option('--kubeconfig <file>', "the management cluster's kubeconfig (default: the pod's service account)")
    .option(...DOOR_DOMAIN)
    .option(...DOOR_ADDRESS)
    .action(async (o: { kubeconfig?: string } & DoorFlags, cmd: Command) => {
      const root = loggerFor(cmd);
      const door = doorOf(o);
      const kube = managementClient('run', o.kubeconfig);
      const release = await runningRelease();
      const manager = new ComponentManager(
        [new OperatorComponent({ kube, door, release })],
        componentLogger(root, 'manager'),
      );
      await runUntilSignal(manager, root, { onReady: () => root.info('operator ready') });
    });
  op.command('door')
    .description(
      "the management cluster's front door: one TLS port that routes each hosted cluster with spec.exposure.type FrontDoor by server name (<name>.<domain>, and its nodes' konnectivity., join. and node-api. names) to its control-plane pods, untouched; every replica routes every name",
    )
    .requiredOption(
      '--domain <domain>',
      "the domain the clusters' names live under (the operator's --front-door-domain)",
    )
    .option('--port <port>', 'the port it listens on', String(MANAGEMENT_DOOR_DEFAULTS.port))
    .option('--kubeconfig <file>', "the management cluster's kubeconfig (default: the pod's service account)")
    .action(async (o: { domain: string; port: string; kubeconfig?: string }, cmd: Command) => {
      const root = loggerFor(cmd);
      const domain = parseDoorDomain(o.domain, '--domain');
      const port = Number(o.port);
      if (!Number.isInteger(port) || port < 1 || port > 65535)
        throw new UserError(`--port ${o.port}: expected a port from 1 to 65535`);
      const kube = managementClient('door', o.kubeconfig);
      const manager = new ComponentManager(
        [new ManagementDoorComponent({ kube, domain, port })],
        componentLogger(root, 'manager'),
      );
      await runUntilSignal(manager, root, { onReady: () => root.info('front door ready') });
    });
}

interface DoorFlags {
  frontDoorDomain?: string;
  frontDoorAddress?: string;
}

const DOOR_DOMAIN = [
  '--front-door-domain <domain>',
  "the management cluster's front door (kctl operator door): the domain hosted clusters' names live under; clusters with spec.exposure.type FrontDoor are reached there",
] as const;
const DOOR_ADDRESS = [
  '--front-door-address <ip:port>',
  "the front door's address and port as nodes and admins dial it (a management node's address and the door Service's node port, or a load balancer's)",
] as const;

/** The door from the flags: both or neither. */
function doorOf(o: DoorFlags): ManagementDoor | undefined {
  if (o.frontDoorDomain === undefined && o.frontDoorAddress === undefined) return undefined;
  if (o.frontDoorDomain === undefined)
    throw new UserError("--front-door-address needs --front-door-domain: the domain the clusters' names live under");
  return parseManagementDoor(o.frontDoorDomain, o.frontDoorAddress);
}

function managementClient(command: string, kubeconfig: string | undefined): KubeClient {
  try {
    return new KubeClient(kubeconfig ? credentialsFromKubeconfig(kubeconfig) : inClusterCredentials());
  } catch (err) {
    throw new UserError(`kctl operator ${command}: ${messageOf(err)}; give --kubeconfig outside a pod`);
  }
}
