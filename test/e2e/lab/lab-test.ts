// The scaffold of every lab test: the lab with its hosts, a directory for the test's files, and
// one cleanup registered with the test, so it runs when the test fails too:
//
//   1. the test's own steps (beforeTeardown), e.g. stopping a worker gracefully so its pods go;
//   2. lab.destroy(): every process started with host.spawn is killed (the lab keeps them, so a
//      test needs no list of its own), and the namespaces go;
//   3. what a killed kctl worker leaves on a host it ran on (containerd shims and mounts, the
//      kubelet's cgroups), for each of `workers`;
//   4. the directory, unless something is still mounted under it (removing it would reach into
//      the mount): then the cleanup fails naming the mounts.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { mountsUnder } from '../../../src/base/fs.ts';
import { cleanupWorkerHost } from './cluster.ts';
import { requireKctl } from './kctl.ts';
import { createLab, type Lab, type LabOptions } from './lab.ts';

export interface LabTestOptions {
  /**
   * Prefix of the test's directory: under the OS temp dir, or an absolute one (a systemd lab has
   * its own /tmp, so its files go under /var/lib). `kctl-<lab name>-` by default.
   */
  dir?: string;
  /** Hosts that run `kctl worker` with `<dir>/<host>-data` and `<dir>/<host>-run` (startLabWorker's layout). */
  workers?: readonly string[];
  /** Subnets and their router (lab.ts LabOptions). */
  sites?: LabOptions['sites'];
  router?: string;
  /** NATed hosts and their gateways (lab.ts LabOptions). */
  nat?: LabOptions['nat'];
}

export interface LabTest {
  readonly lab: Lab;
  /** The test's directory, removed at the end. */
  readonly dir: string;
  /** The built kctl executable. */
  readonly kctlBin: string;
  /** Runs `fn` at cleanup before the lab's processes are killed; steps run in the order they were added. */
  beforeTeardown(fn: () => Promise<void>): void;
}

/** Starts lab `name` with `hosts` for test `t` and registers its cleanup (see the top of this file). */
export async function startLab(
  t: { after: (fn: () => Promise<void>) => void },
  name: string,
  hosts: string[],
  o: LabTestOptions = {},
): Promise<LabTest> {
  const kctlBin = requireKctl();
  const lab = await createLab(name, hosts, { sites: o.sites, router: o.router, nat: o.nat });
  const steps: (() => Promise<void>)[] = [];
  // The cleanup is registered before the directory exists, so a failed mkdtemp still tears the lab down.
  const made: { dir?: string } = {};
  t.after(async () => {
    for (const step of steps) await step();
    await lab.destroy();
    const { dir } = made;
    if (!dir) return;
    for (const h of o.workers ?? []) await cleanupWorkerHost(join(dir, `${h}-data`), join(dir, `${h}-run`), h);
    const mounts = await mountsUnder([dir]);
    if (mounts.length > 0) throw new Error(`kept ${dir}: still mounted under it: ${mounts.join(', ')}`);
    await rm(dir, { recursive: true, force: true });
  });
  const prefix = o.dir ?? `kctl-${name}-`;
  const dir = await mkdtemp(isAbsolute(prefix) ? prefix : join(tmpdir(), prefix));
  made.dir = dir;
  return { lab, dir, kctlBin, beforeTeardown: (fn) => steps.push(fn) };
}
