// The shipped executable carries the pinned set; staging from it yields binaries that run and
// report their pinned versions; tampering, races and corrupt payloads are handled.
import assert from 'node:assert/strict';
import { execa } from 'execa';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { copyFile, open, readFile, realpath, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { pino } from 'pino';
import { componentVersion, isStagedBinary, loadManifest } from '../../../src/payload/manifest.ts';
import { readEmbeddedPayload } from '../../../src/payload/payload.ts';
import { KCTL_IMAGE, PROXY_AGENT_IMAGE } from '../../../src/payload/images.ts';
import { stageComponents } from '../../../src/payload/stage.ts';
import { STAGE_COMMAND } from '../../../src/payload/stage-command.ts';
import { checkVersion } from '../../../src/payload/verify.ts';
import { tempDir } from '../../helpers.ts';
import { kctl, requireKctl } from '../lab/kctl.ts';
import { alive, waitFor } from '../../wait.ts';

const { manifest } = loadManifest();
const shipped = manifest.components.filter(isStagedBinary);
const sha = async (p: string) =>
  createHash('sha256')
    .update(await readFile(p))
    .digest('hex');

test('kctl version -o json lists every pinned component with version and sha256', async () => {
  const r = await kctl(['version', '-o', 'json']);
  assert.equal(r.exitCode, 0, String(r.stderr));
  const out = JSON.parse(String(r.stdout)) as {
    kctl: string;
    components: Record<string, { version: string; sha256: string }>;
  };
  assert.match(out.kctl, /^\d+\.\d+\.\d+/);
  assert.deepEqual(Object.keys(out.components).sort(), shipped.map((c) => c.name).sort());
  for (const c of shipped) {
    assert.equal(out.components[c.name]!.version, componentVersion(manifest, c), c.name);
    assert.match(out.components[c.name]!.sha256, /^[0-9a-f]{64}$/);
  }
});

test('controller --init-only stages the controller binaries; every staged binary reports its pinned version', async (t) => {
  const dataDir = await tempDir(t);
  const r = await kctl(['controller', '--init-only', '--data-dir', dataDir]);
  assert.equal(r.exitCode, 0, String(r.stderr));
  const controller = shipped.filter((c) => c.roles.includes('controller'));
  for (const c of controller)
    await checkVersion(c, join(dataDir, 'bin', 'current', c.dir ? `${c.dir}/${c.name}` : c.name));
  // Worker-side binaries, staged from the same executable's payload.
  const payload = await readEmbeddedPayload(requireKctl());
  assert.ok(payload, 'dist/kctl carries no payload');
  await stageComponents(payload, join(dataDir, 'bin', 'current'), ['worker'], pino({ level: 'silent' }));
  for (const c of shipped.filter((x) => x.roles.includes('worker'))) {
    await checkVersion(c, join(dataDir, 'bin', 'current', c.dir ? `${c.dir}/${c.name}` : c.name));
  }
});

test('kctl airgap list-images names every image the executable carries and the two it makes (proxy-agent, kctl), and every image the add-on stacks use is among them', async (t) => {
  const r = await kctl(['airgap', 'list-images']);
  assert.equal(r.exitCode, 0, String(r.stderr));
  const listed = String(r.stdout).trim().split('\n');
  const payload = await readEmbeddedPayload(requireKctl());
  const made = [PROXY_AGENT_IMAGE, KCTL_IMAGE];
  assert.deepEqual(
    listed.filter((name) => !made.includes(name)),
    (payload?.index.images ?? []).map((i) => i.name),
  );
  for (const image of made) assert.ok(listed.includes(image), `${image} is listed: ${listed.join(' ')}`);
  // The stacks kctl writes for its add-ons (--init-only writes them too) pull nothing from a registry.
  const dataDir = await tempDir(t);
  const init = await kctl(['controller', '--init-only', '--data-dir', dataDir]);
  assert.equal(init.exitCode, 0, String(init.stderr));
  const used = new Set<string>();
  for (const stack of ['coredns', 'metrics-server']) {
    const text = await readFile(join(dataDir, 'manifests', stack, `${stack}.yaml`), 'utf8');
    for (const m of text.matchAll(/^\s*image: (\S+)$/gm)) used.add(m[1]!);
  }
  assert.deepEqual([...used].sort(), [
    'registry.k8s.io/coredns/coredns:v1.15.0',
    'registry.k8s.io/metrics-server/metrics-server:v0.9.0',
  ]);
  for (const image of used) assert.ok(listed.includes(image), `${image} is used by an add-on but not carried`);
});

test('kctl kubectl stages kubectl into the --data-dir it is given, also when the flag follows the word kubectl', async (t) => {
  const dataDir = await tempDir(t);
  const defaultDir = '/var/lib/kctl';
  const defaultExisted = existsSync(defaultDir);
  const r = await kctl(['kubectl', 'version', '--client', '--data-dir', dataDir]);
  assert.equal(r.exitCode, 0, String(r.stderr));
  assert.match(String(r.stdout), /Client Version: v\d+\.\d+/);
  assert.ok(existsSync(join(dataDir, 'bin', 'current', 'kubectl')), 'kubectl was not staged into --data-dir');
  // Only provable on a host without a real kctl data dir (never touch one that exists).
  if (!defaultExisted) assert.equal(existsSync(defaultDir), false, `${defaultDir} was created`);
});

test('a tampered staged binary is replaced on the next start, and the log says so', async (t) => {
  const dataDir = await tempDir(t);
  assert.equal((await kctl(['controller', '--init-only', '--data-dir', dataDir])).exitCode, 0);
  const target = join(dataDir, 'bin', 'current', 'kube-scheduler');
  const good = await sha(target);
  await writeFile(target, '#!/bin/sh\necho not kube-scheduler\n');
  const r = await kctl(['controller', '--init-only', '--data-dir', dataDir]);
  assert.equal(r.exitCode, 0, String(r.stderr));
  assert.equal(await sha(target), good);
  // The log names the file in its version's directory (bin/current is a symlink to it).
  const file = await realpath(target);
  const line = String(r.stdout)
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .find((l) => l.msg === 'replaced a corrupted or foreign component binary' && l.file === file);
  assert.ok(line, `no log line names the replacement of ${file}`);
  assert.equal(line.component, 'stage');
});

test('two kctl processes staging into one data dir at once both succeed with correct files', async (t) => {
  const dataDir = await tempDir(t);
  const [a, b] = await Promise.all([1, 2].map(() => kctl(['controller', '--init-only', '--data-dir', dataDir])));
  assert.equal(a!.exitCode, 0, String(a!.stderr));
  assert.equal(b!.exitCode, 0, String(b!.stderr));
  const payload = (await readEmbeddedPayload(requireKctl()))!;
  for (const e of payload.forRoles(['controller']))
    assert.equal(await sha(join(dataDir, 'bin', 'current', e.path)), e.sha256, e.name);
});

/** A process's state and parent pid (from /proc/PID/stat), or undefined once it is gone. */
const procStat = async (pid: number): Promise<[string, string] | undefined> =>
  readFile(`/proc/${pid}/stat`, 'utf8').then(
    (s) => s.slice(s.lastIndexOf(')') + 2).split(' ', 2) as [string, string],
    () => undefined,
  );
/** Running, not gone and not a zombie its parent has yet to reap. */

test('a kctl killed while its staging child runs: the child finishes the staging quietly, and the next start finds it done', async (t) => {
  const dataDir = await tempDir(t);
  // kctl kubectl on an empty data dir stages the controller's binaries in a child kctl; its parent
  // is killed while the child runs, as a command timeout would.
  const parent = execa(requireKctl(), ['kubectl', '--data-dir', dataDir, 'version', '--client'], {
    reject: false,
    all: true,
  });
  // The child's command line names the job, whose dir is under this data dir.
  const childPid = async (): Promise<number | undefined> => {
    const r = await execa('pgrep', ['-f', `${STAGE_COMMAND} .*${dataDir}`], { reject: false });
    return Number(String(r.stdout).trim().split('\n')[0]) || undefined;
  };
  let child: number | undefined;
  while (!child && parent.exitCode === null) child = await childPid();
  if (!child) assert.fail(`no staging child appeared: ${String((await parent).all)}`);
  // Held still while its parent kctl is killed (staging takes only seconds on a quiet machine), so
  // that it learns of that in the middle of its work.
  process.kill(child, 'SIGSTOP');
  const ppid = Number((await procStat(child))![1]);
  process.kill(ppid, 'SIGKILL');
  parent.kill('SIGKILL');
  await waitFor('the parent gone', 10_000, async () => !(await alive(ppid)));
  process.kill(child, 'SIGCONT');
  const { all } = await parent;
  // The orphaned child goes on; it must end on its own, without an error on the shared stderr.
  await waitFor('the staging child ends on its own', 120_000, async () => !(await alive(child)));
  assert.doesNotMatch(String(all), /IPC channel|ERR_/, String(all));
  const again = await kctl(['kubectl', '--data-dir', dataDir, 'version', '--client']);
  assert.equal(again.exitCode, 0, String(again.stderr));
  assert.match(
    String(again.stderr),
    /"staged":0,"replaced":0,/,
    `the next start staged again: ${String(again.stderr)}`,
  );
});

test('an executable whose payload checksum does not match refuses to stage, with one clear line', async (t) => {
  const dir = await tempDir(t);
  const broken = join(dir, 'kctl');
  await copyFile(requireKctl(), broken);
  const payload = (await readEmbeddedPayload(broken))!;
  // kube-apiserver comes first; the other Kubernetes components share its stored bytes.
  const victim = payload.index.components.find((c) => c.name === 'kube-apiserver')!;
  const fh = await open(broken, 'r+');
  // The middle of its bytes as stored (compressed) in the executable.
  assert.equal(victim.stored?.codec, 'zstd', 'component binaries are stored compressed');
  const pos = victim.offset! + Math.floor(victim.stored!.size / 2);
  const byte = Buffer.alloc(1);
  await fh.read(byte, 0, 1, pos);
  byte[0] = byte[0]! ^ 0xff;
  await fh.write(byte, 0, 1, pos);
  await fh.close();
  const dataDir = join(dir, 'data');
  const cmd = await execa(broken, ['controller', '--init-only', '--data-dir', dataDir], { reject: false });
  assert.notEqual(cmd.exitCode, 0);
  const errLines = String(cmd.stderr).trim().split('\n');
  assert.equal(errLines.length, 1);
  assert.match(errLines[0]!, /^kctl: payload component kube-apiserver is corrupt .* reinstall or rebuild kctl$/);
  for (const name of ['kube-apiserver', 'kube-scheduler'])
    await assert.rejects(stat(join(dataDir, 'bin', 'current', name)), { code: 'ENOENT' });
});
