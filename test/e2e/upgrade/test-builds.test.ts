// The executables the upgrade tests start from and move to (assets/test-kctls.ts):
// dist/kctl-previous is an older kctl that runs the previous Kubernetes release, and
// dist/kctl-broken a newer one that refuses to start.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { execa } from 'execa';
import { compareVersions } from '../../../src/base/version.ts';
import { controllerReady, labController, track } from '../lab/cluster.ts';
import { requireBrokenKctl, requireKctl, requirePreviousKctl } from '../lab/kctl.ts';
import { startLab } from '../lab/lab-test.ts';

// The three builds unpack three runtimes; each kctl prunes runtimes no process runs when it unpacks
// its own. This file keeps its runtimes apart, so it never prunes one that the main run's dist/kctl
// is about to start (that run goes on beside it).
process.env.KCTL_RUNTIME_DIR = '/var/cache/kctl/runtime-upgrade-test-builds';

interface VersionReport {
  kctl: string;
  components: Record<string, { version: string; sha256: string }>;
}

const KUBERNETES = ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kubelet', 'kube-proxy', 'kubectl'];

async function versionOf(bin: string): Promise<VersionReport> {
  const r = await execa(bin, ['version', '-o', 'json'], { timeout: 120_000 });
  return JSON.parse(r.stdout) as VersionReport;
}

test('kctl-previous is an older kctl with the previous Kubernetes; kctl-broken a newer one with the same payload', async () => {
  const [current, previous, broken] = await Promise.all([
    versionOf(requireKctl()),
    versionOf(requirePreviousKctl().path),
    versionOf(requireBrokenKctl().path),
  ]);
  assert.equal(previous.kctl, requirePreviousKctl().version);
  assert.equal(broken.kctl, requireBrokenKctl().version);
  assert.ok(compareVersions(previous.kctl, current.kctl) < 0, `${previous.kctl} sorts before ${current.kctl}`);
  assert.ok(compareVersions(broken.kctl, current.kctl) > 0, `${broken.kctl} sorts after ${current.kctl}`);
  const kubernetes = requirePreviousKctl().kubernetes!;
  assert.deepEqual(Object.keys(previous.components).sort(), Object.keys(current.components).sort());
  for (const [name, c] of Object.entries(previous.components)) {
    const now = current.components[name]!;
    if (KUBERNETES.includes(name)) {
      assert.equal(c.version, kubernetes, `${name} in kctl-previous`);
      assert.notEqual(c.sha256, now.sha256, `${name}: other bytes than dist/kctl's ${now.version}`);
    } else {
      assert.deepEqual(c, now, `${name}: the very build dist/kctl carries`);
    }
  }
  assert.deepEqual(broken.components, current.components, "kctl-broken carries dist/kctl's payload");
});

test('kctl-previous runs a controller on the previous Kubernetes; kctl-broken refuses to start and writes nothing', async (t) => {
  const previous = requirePreviousKctl();
  const broken = requireBrokenKctl();
  const { lab, dir } = await startLab(t, 'tb', ['ctl', 'w1'], { dir: 'kctl-test-builds-' });
  const ctl = lab.host('ctl');
  const c = await labController(previous.path, ctl, dir);
  const controller = track(ctl.spawn(previous.path, c.args));
  await controllerReady(controller);

  const v = await c.kubectl(['version', '-o', 'json']);
  assert.equal(v.exitCode, 0, String(v.stderr));
  const { clientVersion, serverVersion } = JSON.parse(String(v.stdout)) as Record<string, { gitVersion: string }>;
  assert.equal(serverVersion!.gitVersion, previous.kubernetes, 'kube-apiserver');
  assert.equal(clientVersion!.gitVersion, previous.kubernetes, 'the bundled kubectl');

  // On a host of its own, where a real build would start (free ports), with a complete config and
  // a valid join token: each fails for being the test build, not for its input or the host.
  const w1 = lab.host('w1');
  const config = join(dir, 'broken.yaml');
  await writeFile(config, `spec:\n  api: { address: ${w1.ip} }\n`);
  const token = join(dir, 'token');
  await writeFile(token, await c.createToken('1h'), { mode: 0o600 });
  const starts: [string, string[]][] = [
    [
      'controller',
      [
        'controller',
        '--single',
        '--config',
        config,
        '--data-dir',
        join(dir, 'b-data'),
        '--run-dir',
        join(dir, 'b-run'),
      ],
    ],
    [
      'worker',
      [
        'worker',
        '--token-file',
        token,
        '--data-dir',
        join(dir, 'bw-data'),
        '--run-dir',
        join(dir, 'bw-run'),
        '--node-name',
        'w1',
      ],
    ],
  ];
  for (const [role, args] of starts) {
    const r = await w1.run(broken.path, args, { timeout: 120_000 });
    assert.notEqual(r.exitCode, 0, `kctl-broken ${role} exits non-zero`);
    const lines = String(r.stderr).trim().split('\n');
    assert.equal(lines.length, 1, `one line: ${String(r.stderr)}`);
    assert.match(lines[0]!, /this is a test build that cannot start/);
    assert.equal(String(r.stdout), '', 'no log line: it started nothing');
  }
  const left = (await readdir(dir)).filter((f) => /^bw?-(data|run)$/.test(f));
  assert.deepEqual(left, [], 'no data or run dir made, nothing staged');
  assert.ok(
    existsSync(join(c.dataDir, 'bin', 'current', 'kube-apiserver')),
    'a start stages into its data dir, as kctl-previous did',
  );
});
