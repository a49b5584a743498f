import type { Command } from 'commander';
import { stringify } from 'yaml';
import { kctlClusterCrd } from '../operator/crd.ts';

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
}
