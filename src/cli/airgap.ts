import type { Command } from 'commander';
import { messageOf, UserError } from '../base/errors.ts';
import { componentLogger, createLogger } from '../base/log.ts';
import { KCTL_VERSION } from '../base/version.ts';
import { BUNDLED_IMAGES } from '../payload/images.ts';
import { findPayload } from '../payload/payload.ts';
import { saveBundledImages } from '../payload/save-images.ts';
import { globals } from './support/globals.ts';

export function airgapCommand(program: Command): void {
  const a = program.command('airgap').description('what kctl carries for hosts without a registry');
  a.command('list-images')
    .description(
      'print the names of the images bundled in kctl (workers import all but the proxy-agent image at start)',
    )
    .action(() => {
      process.stdout.write(BUNDLED_IMAGES.map((i) => i.name).join('\n') + '\n');
    });
  a.command('save-images')
    .description(
      'write bundled images as OCI image-layout tarballs (for ctr images import, skopeo, a registry); the proxy-agent image is made from this executable',
    )
    .argument('[names...]', 'image names as list-images prints them (default: all)')
    .requiredOption('--dir <dir>', 'where to write the .oci.tar files')
    .action(async (names: string[], o: { dir: string }, cmd: Command) => {
      // Logs on stderr: stdout is the list of files written.
      const log = componentLogger(createLogger({ debug: globals(cmd).debug, destination: process.stderr }), 'airgap');
      try {
        const saved = await saveBundledImages(await findPayload(KCTL_VERSION), names, o.dir, log);
        for (const e of saved) process.stdout.write(`${e.name}\t${e.file}\n`);
      } catch (err) {
        throw new UserError(messageOf(err));
      }
    });
}
