// Encryption at rest with the real parts, on etcd read around kube-apiserver with etcdctl: a
// cluster started with encryption off keeps its Secret in plain text; restarted with the default,
// it encrypts that Secret on its own (the first start of a cluster made before encryption at
// rest), and a new one is stored encrypted; `kctl secrets rotate-key` moves every Secret to a new
// key and drops the old one, the Secrets readable throughout; bad input is refused with one line.
import assert from 'node:assert/strict';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { parse } from 'yaml';
import { controllerReady, labController, track, type Tracked } from '../lab/cluster.ts';
import { etcdKeys, etcdRaw } from '../lab/datastore.ts';
import { startLab } from '../lab/lab-test.ts';
import { waitFor } from '../../wait.ts';

const PREFIX = 'k8s:enc:secretbox:v1:';

/** The key name a stored value is encrypted with, or null when it is plain. */
function keyOf(raw: Buffer | null): string | null {
  if (!raw) throw new Error('no such key in etcd');
  const text = raw.toString('latin1');
  if (!text.startsWith(PREFIX)) return null;
  return text.slice(PREFIX.length).split(':')[0]!;
}

async function stop(p: Tracked): Promise<void> {
  p.child.kill('SIGTERM');
  assert.equal(await p.exited, 0, p.log());
}

test('Secrets on etcd: plain while encryption is off, encrypted on the next start with the default, moved to a new key by rotate-key', async (t: TestContext) => {
  const { lab, dir, kctlBin } = await startLab(t, 'enc', ['ctl'], { dir: 'kctl-enc-' });
  const ctl = lab.host('ctl');
  const c = await labController(kctlBin, ctl, dir);
  c.args.splice(c.args.indexOf('--single'), 1, '--storage', 'etcd');
  const config = c.args[c.args.indexOf('--config') + 1]!;
  const raw = (name: string, ns = 'default') => etcdRaw(ctl, c.dataDir, `/registry/secrets/${ns}/${name}`);
  const kctl = (args: string[]) =>
    ctl.run(kctlBin, ['--data-dir', c.dataDir, '--run-dir', c.runDir, ...args], { timeout: 900_000 });

  // A bad list is refused before anything is written.
  await writeFile(config, `spec:\n  api: { address: ${ctl.ip}, encryption: { resources: ['*.*'] } }\n`);
  const bad = await ctl.run(kctlBin, c.args, { timeout: 60_000 });
  assert.notEqual(bad.exitCode, 0);
  assert.match(
    String(bad.stderr).trim().split('\n').pop()!,
    /spec\.api\.encryption\.resources\.0: expected a resource such as secrets/,
  );

  // Encryption off: what a cluster made before this build had.
  await writeFile(config, `spec:\n  api: { address: ${ctl.ip}, encryption: { resources: [] } }\n`);
  let controller = track(ctl.spawn(kctlBin, c.args));
  await controllerReady(controller);
  assert.equal(
    (await c.kubectl(['create', 'secret', 'generic', 'old', '--from-literal=v=plain-old-value'])).exitCode,
    0,
  );
  const before = await raw('old');
  assert.equal(keyOf(before), null);
  assert.ok(before!.includes('plain-old-value'), 'the unencrypted Secret is not in etcd as written');
  await stop(controller);

  // The default: Secrets encrypted; the old one is rewritten on this first start.
  await writeFile(config, `spec:\n  api: { address: ${ctl.ip} }\n`);
  controller = track(ctl.spawn(kctlBin, c.args));
  await controllerReady(controller);
  const keyFile = join(c.dataDir, 'pki', 'encryption-config.yaml');
  assert.equal((await stat(keyFile)).mode & 0o777, 0o600);
  const first = keyOf(
    await waitFor(
      'the old Secret encrypted',
      60_000,
      async () => ((await raw('old'))?.toString('latin1').startsWith(PREFIX) ? raw('old') : undefined),
      controller.log,
    ),
  );
  assert.match(first ?? '', /^key-\d{8}T\d{6}Z-[0-9a-f]{6}$/);
  assert.ok(!(await raw('old'))!.includes('plain-old-value'), 'the encrypted Secret shows its value');
  assert.equal(
    (await c.kubectl(['create', 'secret', 'generic', 'new', '--from-literal=v=plain-new-value'])).exitCode,
    0,
  );
  const created = await raw('new');
  assert.equal(keyOf(created), first);
  assert.ok(!created!.includes('plain-new-value'));
  const read = async (name: string) =>
    Buffer.from(
      String((await c.kubectl(['get', 'secret', name, '-o', 'jsonpath={.data.v}'])).stdout),
      'base64',
    ).toString();
  assert.equal(await read('old'), 'plain-old-value');

  // Rotation: every Secret (those kube-system made too) under a new key, the old one gone.
  const rotated = await kctl(['secrets', 'rotate-key', '-o', 'json']);
  assert.equal(rotated.exitCode, 0, String(rotated.stderr));
  const result = JSON.parse(String(rotated.stdout)) as {
    key: string;
    rewritten: Record<string, number>;
    controllers: string[];
  };
  assert.notEqual(result.key, first);
  assert.ok((result.rewritten.secrets ?? 0) >= 2, String(rotated.stdout));
  const progress = String(rotated.stderr);
  for (const step of [`added ${result.key} as a decryption key`, `${result.key} now encrypts`, 'dropped the old keys'])
    assert.ok(progress.includes(step), `no progress line "${step}":\n${progress}`);
  const keys = await etcdKeys(ctl, c.dataDir, '/registry/secrets/');
  assert.ok(keys.length >= 3, keys.join('\n'));
  for (const key of keys) assert.equal(keyOf(await etcdRaw(ctl, c.dataDir, key)), result.key, key);
  const file = parse(await readFile(keyFile, 'utf8')) as {
    resources: { providers: { secretbox?: { keys: { name: string; secret: string }[] } }[] }[];
  };
  assert.deepEqual(
    file.resources[0]!.providers[0]!.secretbox!.keys.map((k) => k.name),
    [result.key],
    'the old key is still in the config',
  );
  assert.equal(await read('old'), 'plain-old-value');
  assert.equal(await read('new'), 'plain-new-value');
  // No key material in the controller's log or the command's output.
  const secret = file.resources[0]!.providers[0]!.secretbox!.keys[0]!.secret;
  assert.ok(
    !controller.saw(secret) && !progress.includes(secret) && !String(rotated.stdout).includes(secret),
    'a key reached a log',
  );

  const badTimeout = await kctl(['secrets', 'rotate-key', '--timeout', 'soon']);
  assert.notEqual(badTimeout.exitCode, 0);
  assert.match(String(badTimeout.stderr).trim(), /^.*--timeout "soon" is not a duration; use e\.g\. 5m or 90s$/);
  await stop(controller);
});
