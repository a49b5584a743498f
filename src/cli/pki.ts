import type { Command } from 'commander';
import { join } from 'node:path';
import { resignKeySet } from '../controller/encryption/encryption-keys.ts';
import { rotateCa } from '../controller/pki/ca-rotation-run.ts';
import { saveSharedPki } from '../controller/pki/shared-pki.ts';
import { pkiPaths } from '../pki/paths.ts';
import { globals } from './support/globals.ts';
import { KubeClient } from '../kube/client.ts';
import { localController, progressToStderr, timeoutMs } from './support/controller-host.ts';
import { outputOption, printJson, type OutputFormat } from './support/output.ts';

export function pkiCommand(program: Command): void {
  const group = program.command('pki').description("the cluster's certificate authorities");
  group
    .command('rotate-ca')
    .description(
      'replace the cluster CA on every controller and node while the cluster runs: the new CA is trusted first, then signs (every leaf and node client certificate is reissued), then the old one is dropped; no node rejoins. Join tokens made before no longer work. Resumes an interrupted rotation',
    )
    .option('--timeout <duration>', 'how long each phase waits for every controller and node', '10m')
    .addOption(outputOption())
    .action(async (opts: { timeout: string; output: OutputFormat }, cmd: Command) => {
      const timeout = timeoutMs(opts.timeout, '10m');
      const { cfg, pki } = await localController(cmd);
      // Reread per request: this rotation replaces admin.conf's certificate and CA while it runs.
      const kube = KubeClient.fromKubeconfig(pki.adminConf, { reload: true });
      const result = await rotateCa({
        kube,
        pki,
        nodes: cfg.spec.profile !== 'api-only',
        timeoutMs: timeout,
        progress: progressToStderr,
        beforeDrop: async (signing) => {
          if (await resignKeySet(kube, signing)) progressToStderr('encryption key set signed with the new CA');
        },
      });
      if (opts.output === 'json') printJson(result);
      else
        process.stdout.write(
          `the cluster CA is ${result.newCa} now on ${result.controllers.length} controller(s) and ${result.nodes.length} node(s); ${result.oldCa} is trusted nowhere. Make new join tokens (kctl token create): earlier ones carry the old CA\n`,
        );
    });
  group
    .command('save-shared')
    .description(
      "write the cluster's CAs, service-account and encryption keys (what every controller shares) into --dir, one file each with flat names, for a Secret that kctl controller --shared-pki reads in a pod; keep them secret: they are the cluster",
    )
    .requiredOption('--dir <dir>', 'where to write them (made 0700; keys 0600)')
    .action(async (opts: { dir: string }, cmd: Command) => {
      const names = await saveSharedPki(pkiPaths(join(globals(cmd).dataDir, 'pki')).dir, opts.dir);
      process.stdout.write(`${names.join('\n')}\n`);
    });
}
