// containerd serves even when its CRI plugin failed to load, and kubelet then only says "unknown
// service runtime.v1.RuntimeService", restarting forever. The worker's containerd probe reads the
// plugin's state: a CRI plugin that failed is reported in containerd's own words, and containerd
// is restarted in case the cause has passed. Real containerd, on the host, in a temp dir.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { createLogger } from '../../../src/base/log.ts';
import { messageOf } from '../../../src/base/errors.ts';
import { readEmbeddedPayload } from '../../../src/payload/payload.ts';
import { stageComponents } from '../../../src/payload/stage.ts';
import { cleanupContainerd, ContainerdComponent } from '../../../src/worker/containerd.ts';
import { workerPaths, type WorkerPaths } from '../../../src/worker/paths.ts';
import { requireKctl } from '../lab/kctl.ts';

const log = createLogger({ pretty: false, destination: process.stderr });
log.level = 'warn';

async function readyWithin(c: ContainerdComponent, ms: number): Promise<string | undefined> {
  try {
    await c.ready(AbortSignal.timeout(ms));
    return undefined;
  } catch (err) {
    return messageOf(err);
  }
}

async function startContainerd(t: TestContext, paths: WorkerPaths): Promise<ContainerdComponent> {
  const c = new ContainerdComponent({ paths });
  await c.init({ log, statuses: () => [] });
  t.after(async () => {
    await c.stop();
    await cleanupContainerd(paths);
  });
  await c.start();
  return c;
}

test("a CRI plugin that did not load fails containerd's readiness with containerd's reason, and containerd is restarted", async (t) => {
  const payload = await readEmbeddedPayload(requireKctl());
  assert.ok(payload, 'dist/kctl carries no payload');
  const dir = await mkdtemp(join(tmpdir(), 'kctl-cri-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const paths = workerPaths(join(dir, 'data'), join(dir, 'run'));
  await stageComponents(payload, paths.binDir, ['worker'], log);

  // A drop-in that names a snapshotter containerd does not have: the CRI plugin cannot load.
  await mkdir(join(paths.dataDir, 'containerd.d'), { recursive: true });
  const dropIn = join(paths.dataDir, 'containerd.d', 'snapshotter.toml');
  await writeFile(dropIn, "version = 4\n[plugins.'io.containerd.cri.v1.images']\n  snapshotter = 'nosuch'\n");
  const broken = await startContainerd(t, paths);
  // Asked again until the probe has got past containerd's start (on a loaded machine its socket
  // may not answer for a while, and that is the reason given meanwhile).
  const cri = /containerd's CRI plugin did not load: .*failed to find snapshotter "nosuch"/;
  const reasons: (string | undefined)[] = [];
  for (const end = Date.now() + 60_000; Date.now() < end && !cri.test(reasons.at(-1) ?? '');)
    reasons.push(await readyWithin(broken, 5_000));
  assert.match(reasons.at(-1) ?? 'ready', cri, `reasons given: ${JSON.stringify(reasons)}`);
  assert.ok(broken.status().restarts >= 1, `restarted once at least: ${JSON.stringify(broken.status())}`);
  await broken.stop();

  // Without the drop-in the same containerd is ready.
  await rm(dropIn);
  const good = await startContainerd(t, paths);
  assert.equal(await readyWithin(good, 30_000), undefined);
});
