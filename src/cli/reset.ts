// `kctl reset`: undoes what kctl did on this host, for either role. The data dir says which
// role ran here; a kctl still running on it (whatever its --run-dir) makes reset refuse.
import type { Command } from 'commander';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { controllerPaths } from '../controller/config/paths.ts';
import { resetController, stopControllerLeftovers } from '../controller/components/reset.ts';
import { componentLogger, type Logger } from '../base/log.ts';
import { liveOwner, OWNER_FILE } from '../supervisor/owner.ts';
import { RUN_DIR_MARKER } from '../supervisor/run-dir.ts';
import { identityFile, readIdentity } from '../worker/index.ts';
import { kubeletCgroupRoot } from '../worker/kubelet.ts';
import { cleanupNetwork } from '../worker/network.ts';
import { CNI_BRIDGE } from '../worker/cni.ts';
import { workerPaths } from '../worker/paths.ts';
import { resetWorker } from '../worker/reset.ts';
import { UserError } from '../base/errors.ts';
import { globals, loggerFor } from './support/globals.ts';

export interface DataDirRoles {
  /** The files that gave each role away, relative to the data dir. */
  controller: string[];
  worker: string[];
}

/** What ran on `dataDir`: the controller's CA key or config, the worker's identity or join state. */
export function dataDirRoles(dataDir: string, runDir: string): DataDirRoles {
  const c = controllerPaths(dataDir, runDir);
  const w = workerPaths(dataDir, runDir);
  const found = (files: string[]) => files.filter((f) => existsSync(f)).map((f) => f.slice(dataDir.length + 1));
  return {
    controller: found([join(c.pkiDir, 'ca.key'), join(dataDir, 'cluster-config.yaml')]),
    worker: found([identityFile(w), w.joinMarker, w.bootstrapKubeconfig]),
  };
}

/** What a data dir may hold without either role having run there (`kctl kubectl` stages bin/). */
const ROLELESS_ENTRIES = new Set(['bin', OWNER_FILE]);

export interface ResetSteps {
  controller: () => Promise<void>;
  /** Stops a crashed controller's children only; the worker reset that follows removes the dirs. */
  controllerLeftovers: () => Promise<void>;
  worker: () => Promise<void>;
}

/** Checks, decides the role, then runs the matching steps; changes nothing when it refuses. */
export async function reset(dataDir: string, runDir: string, steps: ResetSteps, log: Logger): Promise<void> {
  if (!existsSync(dataDir)) throw new UserError(`nothing to reset: ${dataDir} does not exist`);
  const owner = await liveOwner(dataDir);
  if (owner) {
    throw new UserError(
      `a kctl ${owner.role} (pid ${owner.pid}) is running on ${dataDir}; stop it first (kill -TERM ${owner.pid}), then run kctl reset`,
    );
  }
  const roles = dataDirRoles(dataDir, runDir);
  if (roles.controller.length && roles.worker.length) {
    log.info(
      { controller: roles.controller, worker: roles.worker },
      `${dataDir} holds both a controller and a worker: resetting both`,
    );
    await steps.controllerLeftovers();
    await steps.worker();
  } else if (roles.controller.length) {
    log.info({ found: roles.controller }, `resetting the controller in ${dataDir}`);
    await steps.controller();
  } else if (roles.worker.length) {
    log.info({ found: roles.worker }, `resetting the worker in ${dataDir}`);
    await steps.worker();
  } else {
    const foreign = readdirSync(dataDir)
      .filter((e) => !ROLELESS_ENTRIES.has(e))
      .sort();
    if (foreign.length) {
      throw new UserError(
        `${dataDir} does not look like a kctl data dir (no pki/ca.key, cluster-config.yaml or worker.json; it holds ${foreign.slice(0, 3).join(', ')}${foreign.length > 3 ? ', ...' : ''}); nothing removed`,
      );
    }
    log.info(`no controller or worker ran on ${dataDir}: removing staged binaries only`);
    await steps.controller(); // stops only what pid files prove ours; removes bin/ and the dirs
  }
}

export function resetCommand(program: Command): void {
  program
    .command('reset')
    .description('on a stopped controller or worker: remove everything kctl made on this host, and the data dir')
    .addHelpText(
      'after',
      [
        '',
        'Refuses, changing nothing, while a kctl controller or worker runs on this --data-dir.',
        'The data dir tells the role:',
        '  controller: stops children a crashed kctl left behind (by their pid files, only if they run',
        "              kctl's staged binaries), removes the run dir and the data dir: staged binaries,",
        '              etcd / kine data, PKI and CA keys, kubeconfigs, cluster-config.yaml.',
        '  worker:     removes containers, mounts, CNI bridge, routes and iptables rules kctl added,',
        '              then the run dir and the data dir.',
        `The run dir is removed only if kctl made it (it holds ${RUN_DIR_MARKER}); another is left as it is.`,
        'A mount point below either dir that cannot be unmounted stops reset before anything under that dir goes.',
        'Each removed file or directory is logged.',
      ].join('\n'),
    )
    .action(async (_o: unknown, cmd: Command) => {
      const g = globals(cmd);
      const log = componentLogger(loggerFor(cmd), 'reset');
      const cp = controllerPaths(g.dataDir, g.runDir);
      const wp = workerPaths(g.dataDir, g.runDir);
      await reset(
        g.dataDir,
        g.runDir,
        {
          controller: () => resetController(cp, log),
          controllerLeftovers: () => stopControllerLeftovers(cp, log),
          worker: async () => {
            const id = await readIdentity(wp);
            await resetWorker(
              wp,
              {
                cgroupRoot: id ? kubeletCgroupRoot(wp, id.nodeName) : '/kctl/none',
                bridge: CNI_BRIDGE,
                removeRoutes: () => cleanupNetwork(wp),
              },
              log,
            );
          },
        },
        log,
      );
    });
}
