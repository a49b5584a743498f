import type { Command } from 'commander';
import { EmbeddedPayload, findPayload } from '../payload/payload.ts';
import { KCTL_VERSION } from '../base/version.ts';
import { outputOption, printJson, type OutputFormat } from './support/output.ts';

export function versionCommand(program: Command): void {
  program
    .command('version')
    .description('print the kctl version and the pinned component versions it carries')
    .addOption(outputOption())
    .action(async (opts: { output: OutputFormat }) => {
      const payload = await findPayload(KCTL_VERSION);
      const components = Object.fromEntries(
        payload.index.components.map((c) => [c.name, { version: c.version, sha256: c.sha256 }]),
      );
      if (opts.output === 'json') {
        // The executable's Node runtime, as its launcher unpacked it (absent in a checkout run).
        const runtime =
          payload instanceof EmbeddedPayload && payload.runtime
            ? { node: process.versions.node, sha256: payload.runtime.sha256, path: process.execPath }
            : undefined;
        printJson({ kctl: KCTL_VERSION, ...(runtime && { runtime }), components });
        return;
      }
      const width = Math.max(...payload.index.components.map((c) => c.name.length));
      const lines = [
        `kctl ${KCTL_VERSION}`,
        ...payload.index.components.map((c) => `  ${c.name.padEnd(width)}  ${c.version}`),
      ];
      process.stdout.write(lines.join('\n') + '\n');
    });
}
