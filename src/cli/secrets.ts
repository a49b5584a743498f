import type { Command } from 'commander';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseDuration } from '../base/duration.ts';
import { UserError } from '../base/errors.ts';
import { loadConfig } from '../controller/config.ts';
import { rotateKey } from '../controller/encryption-rotation.ts';
import { KubeClient } from '../kube/client.ts';
import { pkiPaths } from '../pki/index.ts';
import { globals } from './support/globals.ts';
import { outputOption, printJson, type OutputFormat } from './support/output.ts';

export function secretsCommand(program: Command): void {
  const secrets = program.command('secrets').description('encryption at rest of Secrets (spec.api.encryption)');
  secrets
    .command('rotate-key')
    .description('encrypt every Secret with a new key on every live controller, then drop the old key (resumes an interrupted rotation)')
    .option('--timeout <duration>', 'how long each step waits for every controller to load the keys', '5m')
    .addOption(outputOption())
    .action(async (opts: { timeout: string; output: OutputFormat }, cmd: Command) => {
      const timeoutMs = parseDuration(opts.timeout);
      if (timeoutMs === null || timeoutMs <= 0) throw new UserError(`--timeout "${opts.timeout}" is not a duration; use e.g. 5m or 90s`);
      const g = globals(cmd);
      const cfgFile = join(g.dataDir, 'cluster-config.yaml');
      const pki = pkiPaths(join(g.dataDir, 'pki'));
      if (!existsSync(cfgFile) || !existsSync(pki.adminConf))
        throw new UserError(`no controller at ${g.dataDir}; run this on a controller host (or pass its --data-dir / --name)`);
      const cfg = await loadConfig(cfgFile);
      const result = await rotateKey({
        kube: KubeClient.fromKubeconfig(pki.adminConf),
        localConfig: pki.encryptionConfig,
        resources: cfg.spec.api.encryption.resources,
        timeoutMs,
        // Progress goes to stderr, so -o json leaves stdout to the result.
        progress: (line) => process.stderr.write(`${line}\n`),
      });
      if (opts.output === 'json') printJson(result);
      else process.stdout.write(`every controller encrypts with ${result.key} now; the old key is gone\n`);
    });
}
