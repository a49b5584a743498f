import type { Command } from 'commander';
import { keySetTrust } from '../controller/encryption/encryption-keys.ts';
import { rotateKey } from '../controller/encryption/encryption-rotation.ts';
import { KubeClient } from '../kube/client.ts';
import { localController, progressToStderr, timeoutMs } from './support/controller-host.ts';
import { outputOption, printJson, type OutputFormat } from './support/output.ts';

export function secretsCommand(program: Command): void {
  const secrets = program.command('secrets').description('encryption at rest of Secrets (spec.api.encryption)');
  secrets
    .command('rotate-key')
    .description(
      'encrypt every Secret with a new key on every live controller, then drop the old key (resumes an interrupted rotation)',
    )
    .option('--timeout <duration>', 'how long each step waits for every controller to load the keys', '5m')
    .addOption(outputOption())
    .action(async (opts: { timeout: string; output: OutputFormat }, cmd: Command) => {
      const timeout = timeoutMs(opts.timeout, '5m');
      const { cfg, pki } = await localController(cmd);
      const result = await rotateKey({
        kube: KubeClient.fromKubeconfig(pki.adminConf),
        localConfig: pki.encryptionConfig,
        resources: cfg.spec.api.encryption.resources,
        trust: await keySetTrust(pki),
        timeoutMs: timeout,
        progress: progressToStderr,
      });
      if (opts.output === 'json') printJson(result);
      else process.stdout.write(`every controller encrypts with ${result.key} now; the old key is gone\n`);
    });
}
