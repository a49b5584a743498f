// Handing a role to a new executable: it is kept only once it says it is ready; one that exits
// first or stays unready past the bound is stopped, with the reason for the rollback.
import assert from 'node:assert/strict';
import { chmod, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { handOver, installExecutable, RestartRequest } from '../../../src/supervisor/handover.ts';
import { tempDir } from '../../helpers.ts';
import { quietLogger } from '../konnectivity/fixtures.ts';

/** A stand-in for the new kctl: a shell script. */
async function script(t: TestContext, body: string): Promise<{ file: string; dir: string }> {
  const dir = await tempDir(t, 'kctl-handover-');
  const file = join(dir, 'kctl');
  await writeFile(file, `#!/bin/sh\n${body}\n`);
  await chmod(file, 0o755);
  return { file, dir };
}

const exists = (f: string) =>
  stat(f).then(
    () => true,
    () => false,
  );

test('a new process that says it is ready is kept, with the same arguments', async (t) => {
  const { file, dir } = await script(
    t,
    'echo "$@" > "$(dirname "$0")/args"; touch "$(dirname "$0")/ready"; exec sleep 30',
  );
  const r = await handOver({
    executable: file,
    args: ['controller', '--data-dir', '/x'],
    ready: async (signal) => {
      while (!(await exists(join(dir, 'ready')))) await sleep(20, undefined, { signal });
    },
    timeoutMs: 10_000,
    log: quietLogger(),
  });
  assert.equal(r.ok, true);
  if (!r.ok) return;
  t.after(() => void r.child.kill('SIGKILL'));
  assert.equal(r.child.exitCode, null);
  assert.equal((await readFile(join(dir, 'args'), 'utf8')).trim(), 'controller --data-dir /x');
});

test('a new process that exits before it is ready is reported with its exit code', async (t) => {
  const { file } = await script(t, 'echo "kctl: this is a test build that cannot start" >&2; exit 3');
  const r = await handOver({
    executable: file,
    args: [],
    ready: (signal) => sleep(60_000, undefined, { signal }),
    timeoutMs: 10_000,
    log: quietLogger(),
  });
  assert.deepEqual(r, { ok: false, reason: 'it exited (code 3) before it was ready' });
});

test('a new process not ready within the bound is stopped, and the reason carries the last check', async (t) => {
  const { file, dir } = await script(
    t,
    `trap 'touch "$(dirname "$0")/got-term"; exit 0' TERM; while true; do sleep 0.1; done`,
  );
  const r = await handOver({
    executable: file,
    args: [],
    ready: async (signal) => {
      while (!signal.aborted) await sleep(50, undefined, { signal }).catch(() => undefined);
      throw new Error('kctl 0.2.0 ready did not become ready: not running yet: kube-apiserver starting');
    },
    timeoutMs: 500,
    log: quietLogger(),
  });
  assert.equal(r.ok, false);
  assert.match(!r.ok ? r.reason : '', /^it was not ready within 1 s \(.*not running yet: kube-apiserver starting\)$/);
  assert.equal(await exists(join(dir, 'got-term')), true, 'the new process was not sent SIGTERM');
});

test('the executable is replaced by rename (a running copy keeps its file), and a restart is asked for once', async (t) => {
  const dir = await tempDir(t, 'kctl-install-');
  const [installed, next] = [join(dir, 'kctl'), join(dir, 'kctl-next')];
  await writeFile(installed, 'old');
  await writeFile(next, 'new');
  const before = (await stat(installed)).ino;
  await installExecutable(next, installed);
  assert.equal(await readFile(installed, 'utf8'), 'new');
  assert.notEqual((await stat(installed)).ino, before);
  assert.equal((await stat(installed)).mode & 0o777, 0o755);
  await assert.rejects(
    installExecutable(join(dir, 'missing'), installed),
    /cannot put .*missing in place of .*kctl: ENOENT/,
  );
  assert.equal(await readFile(installed, 'utf8'), 'new');

  const restart = new RestartRequest();
  const first = { installed, next, previous: installed, target: '0.2.0', timeoutMs: 1 };
  restart.request(first, 'upgrading to kctl 0.2.0');
  restart.request({ ...first, target: '0.3.0' }, 'again');
  assert.equal(await restart.requested, 'upgrading to kctl 0.2.0');
  assert.equal(restart.pending?.target, '0.2.0');
});
