// `kctl reset` on a stopped controller: leftover children only if their pid files prove them
// ours, then every file and directory kctl made, each one logged.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { copyFile, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { controllerPaths } from '../../../../src/controller/config/paths.ts';
import { parseConfig } from '../../../../src/controller/config/config.ts';
import { controllerComponents } from '../../../../src/controller/index.ts';
import { CONTROLLER_PROGRAMS, resetController } from '../../../../src/controller/components/reset.ts';
import { pkiPaths } from '../../../../src/pki/index.ts';
import { Supervisor } from '../../../../src/supervisor/process.ts';
import { prepareRunDir, RUN_DIR_MARKER } from '../../../../src/supervisor/run-dir.ts';
import { captureLogger, tempDir } from '../../../helpers.ts';
import { spawnProcess } from '../../supervisor/util.ts';
import { alive, waitFor } from '../../../wait.ts';

const RELEASE = { version: '0.1.0', kubernetes: 'v1.36.3', etcd: 'v3.6.14' };

test('reset stops a leftover child that runs our staged binary, leaves a foreign pid alone, removes and lists everything', async (t) => {
  const dir = await tempDir(t);
  const paths = controllerPaths(join(dir, 'data'), join(dir, 'run'));
  for (const d of [paths.binDir, join(paths.pkiDir, 'etcd'), paths.kineDbDir]) await mkdir(d, { recursive: true });
  await prepareRunDir(paths.runDir);
  for (const f of [
    join(paths.pkiDir, 'ca.key'),
    join(paths.pkiDir, 'admin.conf'),
    join(paths.kineDbDir, 'state.db'),
    join(paths.dataDir, 'cluster-config.yaml'),
    paths.statusSocket,
  ])
    await writeFile(f, 'x');
  // A kine left behind by a killed kctl: a copy of sleep staged as <bin>/kine.
  await copyFile('/bin/sleep', join(paths.binDir, 'kine'));
  const leftover = await spawnProcess(t, join(paths.binDir, 'kine'), ['30']);
  await writeFile(join(paths.runDir, 'kine.pid'), `${leftover}\n`);
  // A pid file whose pid now belongs to some other program.
  const foreign = await spawnProcess(t, '/bin/sleep', ['30']);
  await writeFile(join(paths.runDir, 'kube-apiserver.pid'), `${foreign}\n`);

  const { log, lines } = captureLogger();
  await resetController(paths, log);

  await waitFor('the leftover kine to exit', 5_000, async () => !(await alive(leftover)));
  assert.equal(await alive(foreign), true, 'reset stopped a process that is not ours');
  assert.equal(existsSync(paths.dataDir), false);
  assert.equal(existsSync(paths.runDir), false);
  const removed = lines()
    .filter((l) => String(l.msg).startsWith('removed '))
    .map((l) => l.path);
  assert.deepEqual(removed, [
    join(paths.runDir, RUN_DIR_MARKER),
    join(paths.runDir, 'status.sock'),
    paths.runDir,
    paths.binRoot,
    join(paths.dataDir, 'cluster-config.yaml'),
    paths.kineDbDir,
    paths.pkiDir,
    paths.dataDir,
  ]);
  assert.ok(lines().some((l) => /stopping leftover .*kine/.test(String(l.msg))));
});

test('a --run-dir kctl did not make (here: a home directory) loses nothing; the data dir still goes', async (t) => {
  const dir = await tempDir(t);
  const home = join(dir, 'home-x');
  await mkdir(home);
  await writeFile(join(home, 'notes.txt'), 'x');
  const paths = controllerPaths(join(dir, 'data'), home);
  await mkdir(paths.pkiDir, { recursive: true });
  await writeFile(join(paths.pkiDir, 'ca.key'), 'x');
  const { log, lines } = captureLogger();
  await resetController(paths, log);
  assert.ok(existsSync(join(home, 'notes.txt')));
  assert.equal(existsSync(paths.dataDir), false);
  assert.equal(lines().filter((l) => String(l.msg).startsWith(`left ${home} as it is`)).length, 1);
  assert.ok(!lines().some((l) => String(l.msg).startsWith(`removed ${home}`)));
});

test('reset knows every program a controller supervises, in start order, for every profile and storage', async (t) => {
  // Components are only built here, never started: an admin kubeconfig that names a server is enough.
  const dir = await tempDir(t);
  await mkdir(join(dir, 'pki'));
  await writeFile(
    join(dir, 'pki', 'admin.conf'),
    'clusters: [{ cluster: { server: "https://10.0.0.1:6443" } }]\nusers: [{ user: { token: x } }]\n',
  );
  const pki = pkiPaths(join(dir, 'pki'));
  const paths = controllerPaths(join(dir, 'data'), join(dir, 'run'));
  for (const profile of ['full', 'api-only'] as const)
    for (const storage of ['etcd', 'kine'] as const) {
      const cfg = parseConfig(
        { spec: { api: { address: '10.0.0.1' }, profile, storage: { type: storage } } },
        'kctl.yaml',
      );
      const supervised = controllerComponents({ cfg, paths, pki, release: RELEASE })
        .filter((c) => c instanceof Supervisor)
        .map((c) => c.name);
      assert.ok(supervised.length > 0);
      assert.deepEqual(
        CONTROLLER_PROGRAMS.filter((p) => supervised.includes(p)),
        supervised,
        `${profile} on ${storage}: every supervised component is in CONTROLLER_PROGRAMS, in start order`,
      );
    }
});
