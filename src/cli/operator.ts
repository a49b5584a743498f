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
      'print the operator for the management cluster (kubectl apply -f -): namespace kctl-system, its service account and RBAC, and a Deployment of the kctl image running `kctl operator run`',
    )
    .option('--replicas <n>', 'operator pods (one acts at a time)', '2')
    .action((o: { replicas: string }) => {
      const replicas = Number(o.replicas);
      if (!Number.isInteger(replicas) || replicas < 1 || replicas > 10)
        throw new UserError(`--replicas ${o.replicas}: expected a whole number from 1 to 10`);
      process.stdout.write(
        operatorManifests(KCTL_VERSION, replicas)
          .map((m) => stringify(m))
          .join('---\n'),
      );
    });
  op.command('run')
    .description(
      'reconcile every KctlCluster of the management cluster into its control plane: a database on the PostgreSQL its datastore names, its CAs in a Secret (made once), a Deployment of the kctl image, a Service, an admin kubeconfig Secret, and its status; one replica acts (a leader Lease)',
    )
    .option('--kubeconfig <file>', "the management cluster's kubeconfig (default: the pod's service account)")
    .action(async (o: { kubeconfig?: string }, cmd: Command) => {
      const root = loggerFor(cmd);
      let kube: KubeClient;
      try {
        kube = new KubeClient(o.kubeconfig ? credentialsFromKubeconfig(o.kubeconfig) : inClusterCredentials());
      } catch (err) {
        throw new UserError(`kctl operator run: ${messageOf(err)}; give --kubeconfig outside a pod`);
      }
      const manager = new ComponentManager([new OperatorComponent({ kube })], componentLogger(root, 'manager'));
      await runUntilSignal(manager, root, { onReady: () => root.info('operator ready') });
    });
}
