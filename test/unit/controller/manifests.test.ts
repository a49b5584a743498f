import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { ManifestApplierComponent, parseStack } from '../../../src/controller/manifests.ts';
import { KubeClient } from '../../../src/kube/client.ts';
import { captureLogger, tempDir } from '../../helpers.ts';

test('a stack parses into objects; bad YAML and non-objects are reported with file and line', () => {
  const ok = parseStack([
    {
      name: 'demo/a.yaml',
      text: 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n',
    },
  ]);
  assert.deepEqual(
    ok.objects.map((o) => o.metadata.name),
    ['a', 'b'],
  );
  assert.deepEqual(ok.errors, []);
  const bad = parseStack([
    { name: 'demo/a.yaml', text: 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n' },
    { name: 'demo/b.yaml', text: 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n' },
    { name: 'demo/c.yaml', text: 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\njust: a map\n' },
  ]);
  assert.equal(bad.errors.length, 2);
  assert.match(bad.errors[0]!, /^demo\/b\.yaml:\d+: /);
  assert.equal(bad.errors[1], 'demo/c.yaml:5: not a Kubernetes object (apiVersion, kind and metadata.name are required)');
});

/** fs.watch handles the process holds, once closed ones are gone (a handle closes on the next turn). */
async function watchers(): Promise<number> {
  await new Promise((r) => setImmediate(r));
  return process.getActiveResourcesInfo().filter((r) => r === 'FSEventWrap').length;
}

test('stop() while start() is still making the directory leaves no watcher behind, so the process can exit', async (t) => {
  const dir = await tempDir(t);
  const noApi = new KubeClient(() => {
    throw new Error('an empty manifests directory needs no API call');
  });
  const baseline = await watchers();
  // The usual order first: a watcher while running, none after stop().
  const normal = new ManifestApplierComponent(join(dir, 'a', 'manifests'), join(dir, 'a'), noApi, captureLogger().log);
  await normal.start();
  assert.ok((await watchers()) > baseline, 'a running applier watches its directory');
  await normal.stop();
  assert.equal(await watchers(), baseline);
  // A signal during start: stop() runs before the directory exists.
  const raced = new ManifestApplierComponent(join(dir, 'b', 'manifests'), join(dir, 'b'), noApi, captureLogger().log);
  const starting = raced.start();
  await raced.stop();
  await starting;
  assert.equal(await watchers(), baseline, 'no watcher made after stop()');
});
