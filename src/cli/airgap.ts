import type { Command } from 'commander';
import { BUNDLED_IMAGE_NAMES } from '../payload/images.ts';

export function airgapCommand(program: Command): void {
  const a = program.command('airgap').description('what kctl carries for hosts without a registry');
  a.command('list-images')
    .description('print the names of the images bundled in kctl (imported on every worker at start)')
    .action(() => {
      process.stdout.write(BUNDLED_IMAGE_NAMES.join('\n') + '\n');
    });
}
