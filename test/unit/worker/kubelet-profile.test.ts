import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { test } from 'node:test';
import { KubeClient } from '../../../src/kube/client.ts';
import { workerProfilesConfigMap } from '../../../src/kube/worker-profiles.ts';
import { KubeletProfileComponent } from '../../../src/worker/kubelet-profile.ts';
import { workerPaths } from '../../../src/worker/paths.ts';
import { waitFor } from '../../wait.ts';
import { captureLogger, tempDir } from '../../helpers.ts';
import { fakeApiServer, json, watchStream, type FakeApiServer } from '../kube/fake-apiserver.ts';

const cm = (profiles: Record<string, Record<string, unknown>>, resourceVersion = '1') => ({
  ...workerProfilesConfigMap(profiles),
  metadata: { ...workerProfilesConfigMap(profiles).metadata, resourceVersion },
});

/** A kubelet that counts what it was asked; `refuse` makes it never ready after a restart. */
function fakeKubelet() {
  const k = {
    writes: 0,
    restarts: [] as string[],
    refuse: false,
    writeConfig: async () => void k.writes++,
    restart: async (reason: string) => void k.restarts.push(reason),
    ready: async () => {
      if (k.refuse) throw new Error('exited with code 2');
    },
    name: 'kubelet',
  };
  return k;
}

async function profile(t: Parameters<typeof tempDir>[0], api: FakeApiServer, name?: string, saved?: unknown) {
  const dir = await tempDir(t);
  const paths = workerPaths(dir, dir);
  await writeFile(paths.kubeletKubeconfig, 'the node has its certificate: use the node client\n');
  if (saved) await writeFile(paths.kubeletProfile, JSON.stringify(saved));
  const kubelet = fakeKubelet();
  const log = captureLogger();
  const c = new KubeletProfileComponent({
    name,
    paths,
    kube: new KubeClient({ server: api.url }),
    kubelet,
    readyAfterChangeMs: 200,
    savedAfterMs: 300,
  });
  await c.init({ log: log.log, statuses: () => [] });
  t.after(() => c.stop());
  return { c, kubelet, paths, log };
}

test('a named profile the cluster lacks stops the start with the names it has; none named and none defined is kctl settings', async (t) => {
  const api = await fakeApiServer(t, (req, res) => json(res, 200, cm({ small: { maxPods: 17 }, big: {} })));
  const named = await profile(t, api, 'huge');
  await assert.rejects(
    named.c.start(),
    /^Error: worker profile huge is not in the cluster's spec.workerProfiles \(it has big, small\); add it/,
  );
  const unnamed = await profile(t, api);
  await unnamed.c.start();
  assert.equal(unnamed.c.values(), undefined);
  assert.deepEqual(unnamed.c.snapshot(), { name: 'default', defined: false, fields: [] });
});

test('controllers from before profiles (403 on the object) run kctl settings, and refuse a named profile', async (t) => {
  const api = await fakeApiServer(t, (_req, res) =>
    json(res, 403, { kind: 'Status', code: 403, reason: 'Forbidden', message: 'configmaps is forbidden' }),
  );
  const unnamed = await profile(t, api);
  await unnamed.c.start();
  assert.equal(unnamed.c.values(), undefined);
  const named = await profile(t, api, 'small');
  await assert.rejects(named.c.start(), /the cluster publishes no worker profiles/);
});

test(
  'a change restarts kubelet with it; one kubelet refuses puts back what ran, once, with the reason',
  { timeout: 20_000 },
  async (t) => {
    let watch: ReturnType<typeof watchStream> | undefined;
    const api = await fakeApiServer(t, (req, res) => {
      if (req.query.get('watch') === 'true') watch = watchStream(res);
      else if (req.query.get('fieldSelector'))
        json(res, 200, { metadata: { resourceVersion: '1' }, items: [cm({ small: { maxPods: 17 } })] });
      else json(res, 200, cm({ small: { maxPods: 17 } }));
    });
    const { c, kubelet, paths } = await profile(t, api, 'small');
    await c.start();
    assert.deepEqual(c.values(), { maxPods: 17 });
    assert.deepEqual(JSON.parse(await readFile(paths.kubeletProfile, 'utf8')), {
      name: 'small',
      values: { maxPods: 17 },
    });
    await waitFor('the watch', 5_000, async () => watch !== undefined);

    watch!.event('MODIFIED', cm({ small: { maxPods: 21 } }, '2'));
    await waitFor('kubelet restarted', 5_000, async () => kubelet.restarts.length === 1);
    assert.deepEqual(c.values(), { maxPods: 21 });
    assert.deepEqual(kubelet.restarts, ['worker profile small changed']);
    assert.equal(kubelet.writes, 1);

    kubelet.refuse = true;
    watch!.event('MODIFIED', cm({ small: { maxPods: 25 } }, '3'));
    await waitFor('kubelet put back', 5_000, async () => kubelet.restarts.length === 3);
    assert.deepEqual(kubelet.restarts.slice(1), [
      'worker profile small changed',
      'back to the previous worker profile',
    ]);
    assert.deepEqual(c.values(), { maxPods: 21 });
    assert.deepEqual(JSON.parse(await readFile(paths.kubeletProfile, 'utf8')).values, { maxPods: 21 });
    assert.match(
      c.snapshot().problem ?? '',
      /^kubelet did not start with worker profile small \(exited with code 2\); it runs/,
    );
    // The same refused settings again (another change of the object): not tried a second time.
    watch!.event('MODIFIED', cm({ small: { maxPods: 25 } }, '4'));
    kubelet.refuse = false;
    watch!.event('MODIFIED', cm({ small: { maxPods: 30 } }, '5'));
    await waitFor('the next change applied', 5_000, async () => kubelet.restarts.length === 4);
    assert.deepEqual(c.values(), { maxPods: 30 });
    assert.equal(c.snapshot().problem, undefined);
  },
);

test(
  'restarted while the cluster does not answer: the saved profile after a while, if it is the one asked for',
  { timeout: 20_000 },
  async (t) => {
    const api = await fakeApiServer(t, (_req, res) =>
      json(res, 503, { kind: 'Status', code: 503, message: 'unavailable' }),
    );
    const { c } = await profile(t, api, 'small', { name: 'small', values: { maxPods: 17 } });
    await c.start();
    assert.deepEqual(c.values(), { maxPods: 17 });
    assert.match(
      c.snapshot().problem ?? '',
      /the cluster could not be read .*running the profile saved at the last start/,
    );
    // Saved for another --profile: not used; the start waits for the cluster (stopped here after a while).
    const other = await profile(t, api, 'big', { name: 'small', values: { maxPods: 17 } });
    const started = other.c.start().then(() => 'started');
    assert.equal(await Promise.race([started, new Promise((r) => setTimeout(() => r('waiting'), 1500))]), 'waiting');
    await other.c.stop();
    await assert.rejects(started, /stopped before the worker profile could be read/);
  },
);
