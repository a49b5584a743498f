// A kctl management cluster for the hosted tests (test/e2e/hosted/): host mc runs the controller
// and a PostgreSQL for the hosted clusters' data; mw (and mw2, with spare) are its workers, where
// their pods run, with the kctl image (made from this kctl) in their images directories; out is
// another host, for admins.
import assert from 'node:assert/strict';
import { mkdir, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { KCTL_IMAGE, kctlImageOf } from '../../../src/payload/images.ts';
import { waitFor } from '../../wait.ts';
import { controllerReady, labController, startLabWorker, track, type LabController } from './cluster.ts';
import { startLab, type LabTest } from './lab-test.ts';
import type { LabHost } from './lab.ts';
import { startPostgres, type Postgres } from './postgres.ts';

export interface ManagementLab extends LabTest {
  c: LabController;
  mc: LabHost;
  mw: LabHost;
  out: LabHost;
  pg: Postgres;
}

/**
 * Starts lab `name` (its directory prefixed `dir`) with the management cluster ready and PostgreSQL
 * on `pgPort`. `spare` adds a second management worker, mw2 (a control-plane pod may move there);
 * `nodes` are further hosts that run `kctl worker` for hosted clusters (startLabWorker's layout);
 * `kctls` are further kctl executables whose own images the management workers get (a test build).
 */
export async function startManagementLab(
  t: { after: (fn: () => Promise<void>) => void },
  name: string,
  o: {
    dir: string;
    pgPort: number;
    nodes?: string[];
    spare?: boolean;
    kctls?: { path: string; version: string }[];
    /** PostgreSQL's max_connections (bench/operator.ts: many clusters). */
    pgMaxConnections?: number;
  },
): Promise<ManagementLab> {
  const workers = o.spare ? ['mw', 'mw2'] : ['mw'];
  const nodes = o.nodes ?? [];
  const test = await startLab(t, name, ['mc', ...workers, 'out', ...nodes], {
    dir: o.dir,
    workers: [...workers, ...nodes],
  });
  const { lab, dir, kctlBin } = test;
  const [mc, mw, out] = [lab.host('mc'), lab.host('mw'), lab.host('out')];
  // Each image is saved apart (every kctl names its file kctl.oci.tar), then moved in by its tag.
  const kctls = [
    { path: kctlBin, image: KCTL_IMAGE },
    ...(o.kctls ?? []).map((k) => ({ path: k.path, image: kctlImageOf(k.version) })),
  ];
  for (const w of workers)
    for (const { path, image } of kctls) {
      const apart = join(dir, 'saved-image');
      const save = await lab.host(w).run(path, ['airgap', 'save-images', image, '--dir', apart], { timeout: 300_000 });
      assert.equal(save.exitCode, 0, String(save.stderr));
      await mkdir(join(dir, `${w}-data`, 'images'), { recursive: true });
      await rename(join(apart, 'kctl.oci.tar'), join(dir, `${w}-data`, 'images', `${image.split(':').at(-1)}.oci.tar`));
    }
  const c = await labController(kctlBin, mc, dir);
  await controllerReady(track(mc.spawn(kctlBin, c.args)));
  const token = await c.createToken('1h');
  const started = workers.map((w) => startLabWorker(kctlBin, lab.host(w), dir, token));
  // Pods reach it through mw, from the pod network.
  const pg = await startPostgres(t, o.pgPort, { host: mc, trust: '0.0.0.0/0' }, o.pgMaxConnections);
  for (const worker of started)
    await waitFor('management worker ready', 240_000, async () => worker.saw('"msg":"worker ready"'), worker.log);
  return { ...test, c, mc, mw, out, pg };
}
