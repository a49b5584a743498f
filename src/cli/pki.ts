import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseDuration } from '../base/duration.ts';
import { UserError } from '../base/errors.ts';
import { rotateCa } from '../controller/ca-rotation-run.ts';
import { loadConfig } from '../controller/config.ts';
import { KubeClient } from '../kube/client.ts';
import { pkiPaths } from '../pki/index.ts';
import { globals } from './support/globals.ts';
import { outputOption, printJson, type OutputFormat } from './support/output.ts';

export function pkiCommand(program: Command): void {
  const pki = program.command('pki').description("the cluster's certificate authorities");
  pki
    .command('rotate-ca')
    .description(
      'replace the cluster CA on every controller and node while the cluster runs: the new CA is trusted first, then signs (every leaf and node client certificate is reissued), then the old one is dropped; no node rejoins. Join tokens made before no longer work. Resumes an interrupted rotation',
    )
    .option('--timeout <duration>', 'how long each phase waits for every controller and node', '10m')
    .addOption(outputOption())
    .action(async (opts: { timeout: string; output: OutputFormat }, cmd: Command) => {
      const timeoutMs = parseDuration(opts.timeout);
      if (timeoutMs === null || timeoutMs <= 0) throw new UserError(`--timeout "${opts.timeout}" is not a duration; use e.g. 10m or 90s`);
      const g = globals(cmd);
      const cfgFile = join(g.dataDir, 'cluster-config.yaml');
      const paths = pkiPaths(join(g.dataDir, 'pki'));
      if (!existsSync(cfgFile) || !existsSync(paths.adminConf))
        throw new UserError(`no controller at ${g.dataDir}; run this on a controller host (or pass its --data-dir / --name)`);
      const cfg = await loadConfig(cfgFile);
      const result = await rotateCa({
        kube: KubeClient.fromKubeconfig(paths.adminConf, { reload: true }),
        pki: paths,
        nodes: cfg.spec.profile !== 'api-only',
        timeoutMs,
        // Progress goes to stderr, so -o json leaves stdout to the result.
        progress: (line) => process.stderr.write(`${line}\n`),
      });
      if (opts.output === 'json') printJson(result);
      else
        process.stdout.write(
          `the cluster CA is ${result.newCa} now on ${result.controllers.length} controller(s) and ${result.nodes.length} node(s); ${result.oldCa} is trusted nowhere. Make new join tokens (kctl token create): earlier ones carry the old CA\n`,
        );
    });
}
