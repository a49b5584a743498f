import assert from 'node:assert/strict';
import { chmod, chown, mkdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { ManifestApplierComponent, parseStack } from '../../../../src/controller/cluster/manifests.ts';
import { KubeClient } from '../../../../src/kube/client.ts';
import { captureLogger, initialised, tempDir } from '../../../helpers.ts';
import { waitFor } from '../../../wait.ts';

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
  assert.equal(
    bad.errors[1],
    'demo/c.yaml:5: not a Kubernetes object (apiVersion, kind and metadata.name are required)',
  );
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
  const normal = await initialised(
    new ManifestApplierComponent(join(dir, 'a', 'manifests'), join(dir, 'a'), noApi),
    captureLogger().log,
  );
  await normal.start();
  assert.ok((await watchers()) > baseline, 'a running applier watches its directory');
  await normal.stop();
  assert.equal(await watchers(), baseline);
  // A signal during start: stop() runs before the directory exists.
  const raced = await initialised(
    new ManifestApplierComponent(join(dir, 'b', 'manifests'), join(dir, 'b'), noApi),
    captureLogger().log,
  );
  const starting = raced.start();
  await raced.stop();
  await starting;
  assert.equal(await watchers(), baseline, 'no watcher made after stop()');
});

/** An applier over `dir` whose API calls are counted (and fail): a stack it applies makes calls, a skipped one none. */
/** The applier's warn lines, without the advice that ends each. */
const skipWarnings = (a: { lines: () => Record<string, unknown>[] }): string[] =>
  a
    .lines()
    .filter((l) => l.level === 40)
    .map((l) => String(l.msg).replace(/; manifests must .*/, ''));

async function countingApplier(dir: string) {
  let calls = 0;
  const kube = new KubeClient(() => {
    calls++;
    throw new Error('no API server in this test');
  });
  const { log, lines } = captureLogger();
  const applier = await initialised(new ManifestApplierComponent(join(dir, 'manifests'), dir, kube), log);
  return { applier, lines, calls: () => calls };
}

const CONFIGMAP = 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n';

async function stack(
  dir: string,
  name: string,
  o: { dirMode?: number; fileMode?: number; uid?: number } = {},
): Promise<string> {
  const stackDir = join(dir, 'manifests', name);
  await mkdir(stackDir, { recursive: true });
  await writeFile(join(stackDir, 'a.yaml'), CONFIGMAP);
  await chmod(join(dir, 'manifests'), 0o755);
  await chmod(stackDir, o.dirMode ?? 0o755);
  await chmod(join(stackDir, 'a.yaml'), o.fileMode ?? 0o644);
  if (o.uid !== undefined) await chown(join(stackDir, 'a.yaml'), o.uid, o.uid);
  return stackDir;
}

test('a stack that someone other than root (or kctl) could change is skipped with one warning naming the path', async (t) => {
  const dir = await tempDir(t);
  const open = await stack(dir, 'open', { fileMode: 0o666 });
  const shared = await stack(dir, 'shared', { dirMode: 0o775 });
  const a = await countingApplier(dir);
  t.after(() => a.applier.stop());
  await a.applier.start();
  assert.equal(a.calls(), 0, 'an unsafe stack reached the API');
  const warned = a.lines().filter((l) => l.level === 40);
  assert.deepEqual(
    warned.map((l) => l.msg),
    [
      `skipped stack open: ${join(open, 'a.yaml')} is writable by group and others (mode 0666); manifests must belong to root and be writable by no one else`,
      `skipped stack shared: ${shared} is writable by group (mode 0775); manifests must belong to root and be writable by no one else`,
    ].map((m) =>
      process.geteuid?.() === 0 ? m : m.replace('belong to root', `belong to root or uid ${process.geteuid?.()}`),
    ),
  );
  assert.match(a.applier.status().lastError ?? '', /open: .*writable by group and others/);

  // Fixing the modes lets the stacks through (the watcher sees the change); the warnings are not repeated.
  await chmod(join(open, 'a.yaml'), 0o644);
  await chmod(shared, 0o755);
  await waitFor('the fixed stacks to reach the API', 5_000, () => a.calls() > 0);
  await a.applier.settled();
  assert.equal(a.lines().filter((l) => l.level === 40).length, 2);
});

test(
  'a stack file owned by another user, or a symbolic link, is skipped',
  { skip: process.getuid?.() !== 0 && 'needs root to chown' },
  async (t) => {
    const dir = await tempDir(t);
    const foreign = await stack(dir, 'foreign', { uid: 65534 });
    const linked = await stack(dir, 'linked');
    await writeFile(join(dir, 'elsewhere.yaml'), CONFIGMAP);
    await symlink(join(dir, 'elsewhere.yaml'), join(linked, 'b.yaml'));
    const a = await countingApplier(dir);
    t.after(() => a.applier.stop());
    await a.applier.start();
    assert.equal(a.calls(), 0);
    assert.deepEqual(skipWarnings(a), [
      `skipped stack foreign: ${join(foreign, 'a.yaml')} is owned by uid 65534, not by root`,
      `skipped stack linked: ${join(linked, 'b.yaml')} is a symbolic link (only regular files are applied)`,
    ]);
  },
);

test('while the manifests directory itself is writable by others nothing is applied and nothing pruned', async (t) => {
  const dir = await tempDir(t);
  await stack(dir, 'web');
  await chmod(join(dir, 'manifests'), 0o777);
  // What an earlier pass applied: a renamed or removed stack would be pruned if the pass went on.
  await writeFile(
    join(dir, 'manifest-state.json'),
    JSON.stringify({ gone: [{ apiVersion: 'v1', kind: 'ConfigMap', name: 'x', namespace: 'default' }] }),
  );
  const a = await countingApplier(dir);
  t.after(() => a.applier.stop());
  await a.applier.start();
  assert.equal(a.calls(), 0);
  assert.deepEqual(skipWarnings(a), [
    `skipped every stack: ${join(dir, 'manifests')} is writable by group and others (mode 0777)`,
  ]);
  assert.match(await readFile(join(dir, 'manifest-state.json'), 'utf8'), /"gone"/);
});
