// `kctl reset` decides the role from the data dir and refuses while a kctl runs on it.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { UserError } from '../../../src/base/errors.ts';
import { reset, type ResetSteps } from '../../../src/cli/reset.ts';
import { ownerFile, ownerRecord } from '../../../src/supervisor/owner.ts';
import { captureLogger, tempDir } from '../../helpers.ts';
import { spawnProcess } from '../supervisor/util.ts';

function fakeSteps(): { steps: ResetSteps; calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    steps: {
      controller: async () => {
        calls.push('controller');
      },
      controllerLeftovers: async () => {
        calls.push('controllerLeftovers');
      },
      worker: async () => {
        calls.push('worker');
      },
    },
  };
}

async function dataDirWith(t: Parameters<typeof tempDir>[0], files: string[]): Promise<{ data: string; run: string }> {
  const dir = await tempDir(t);
  const data = join(dir, 'data');
  for (const f of files) {
    await mkdir(join(data, f, '..'), { recursive: true });
    await writeFile(join(data, f), 'x');
  }
  await mkdir(data, { recursive: true });
  return { data, run: join(dir, 'run') };
}

const run = async (d: { data: string; run: string }) => {
  const f = fakeSteps();
  const { log, lines } = captureLogger();
  await reset(d.data, d.run, f.steps, log);
  return { calls: f.calls, msgs: lines().map((l) => String(l.msg)) };
};

test('a running kctl (controller or worker) makes reset refuse with its pid and role, changing nothing', async (t) => {
  for (const role of ['controller', 'worker'] as const) {
    const d = await dataDirWith(t, ['pki/ca.key', 'cluster-config.yaml', 'worker.json']);
    const pid = await spawnProcess(t, '/bin/sleep', ['30']);
    await writeFile(ownerFile(d.data), await ownerRecord(pid, role));
    const before = await readdir(d.data, { recursive: true });
    const f = fakeSteps();
    await assert.rejects(reset(d.data, d.run, f.steps, captureLogger().log), (err: Error) => {
      assert.ok(err instanceof UserError);
      assert.equal(
        err.message,
        `a kctl ${role} (pid ${pid}) is running on ${d.data}; stop it first (kill -TERM ${pid}), then run kctl reset`,
      );
      return true;
    });
    assert.deepEqual(f.calls, []);
    assert.deepEqual(await readdir(d.data, { recursive: true }), before);
  }
});

test('a stale owner record (its process gone) does not block reset', async (t) => {
  const d = await dataDirWith(t, ['pki/ca.key']);
  await writeFile(
    ownerFile(d.data),
    (await ownerRecord(process.pid, 'controller')).replace(/"startTime":"\d+"/, '"startTime":"1"'),
  );
  assert.deepEqual((await run(d)).calls, ['controller']);
});

test('the data dir tells the role: controller, worker, or both', async (t) => {
  assert.deepEqual((await run(await dataDirWith(t, ['pki/ca.key', 'pki/ca.crt', 'bin/kine']))).calls, ['controller']);
  assert.deepEqual(
    (await run(await dataDirWith(t, ['cluster-config.yaml']))).calls,
    ['controller'],
    'a controller that died before its PKI',
  );
  assert.deepEqual((await run(await dataDirWith(t, ['worker.json', 'pki/ca.crt']))).calls, ['worker']);
  assert.deepEqual(
    (await run(await dataDirWith(t, ['joined', 'kubelet-bootstrap.conf']))).calls,
    ['worker'],
    'a worker that died before writing its identity',
  );
  const both = await run(await dataDirWith(t, ['pki/ca.key', 'worker.json']));
  assert.deepEqual(both.calls, ['controllerLeftovers', 'worker']);
  assert.ok(
    both.msgs.some((m) => /holds both a controller and a worker: resetting both/.test(m)),
    both.msgs.join('\n'),
  );
});

test('a data dir with neither role: only staged binaries are removed; anything else is refused untouched', async (t) => {
  const staged = await run(await dataDirWith(t, ['bin/kubectl']));
  assert.deepEqual(staged.calls, ['controller']);
  assert.ok(staged.msgs.some((m) => /no controller or worker ran on .*: removing staged binaries only/.test(m)));

  const foreign = await dataDirWith(t, ['bin/kubectl', 'photos/cat.jpg', 'notes.txt']);
  const f = fakeSteps();
  await assert.rejects(
    reset(foreign.data, foreign.run, f.steps, captureLogger().log),
    /does not look like a kctl data dir \(no pki\/ca\.key, cluster-config\.yaml or worker\.json; it holds notes\.txt, photos\); nothing removed/,
  );
  assert.deepEqual(f.calls, []);
  assert.ok(existsSync(join(foreign.data, 'photos/cat.jpg')));
});

test('a missing data dir: nothing to reset', async (t) => {
  const dir = await tempDir(t);
  await assert.rejects(
    reset(join(dir, 'nope'), join(dir, 'run'), fakeSteps().steps, captureLogger().log),
    /nothing to reset: .*nope does not exist/,
  );
});

test('kctl reset --help says it works for both roles', () => {
  const root = new URL('../../..', import.meta.url).pathname;
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/index.ts', 'reset', '--help'], {
    cwd: root,
    encoding: 'utf8',
  });
  assert.equal(r.status, 0);
  assert.match(r.stdout, /on a stopped controller or worker/);
  assert.match(r.stdout, /Refuses, changing nothing, while a kctl controller or worker runs/);
  assert.match(r.stdout, /The run dir is removed only if kctl made it \(it holds \.kctl-run-dir\)/);
});
