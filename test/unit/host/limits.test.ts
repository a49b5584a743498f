// kctl raises the inotify limits that several clusters on one host use up, and never lowers them.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { test, type TestContext } from 'node:test';
import { createLogger } from '../../../src/base/log.ts';
import { KERNEL_LIMITS, raiseKernelLimits } from '../../../src/host/limits.ts';

/** A stand-in for /proc/sys holding the two inotify limits. */
async function fakeProcSys(t: TestContext, instances: string, watches: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'kctl-procsys-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await mkdir(join(dir, 'fs', 'inotify'), { recursive: true });
  await writeFile(join(dir, 'fs', 'inotify', 'max_user_instances'), `${instances}\n`);
  await writeFile(join(dir, 'fs', 'inotify', 'max_user_watches'), `${watches}\n`);
  return dir;
}

function capture() {
  const lines: { level: number; msg: string }[] = [];
  const destination = new Writable({
    write: (c: Buffer, _e, cb) => (lines.push(JSON.parse(c.toString()) as { level: number; msg: string }), cb()),
  });
  return { log: createLogger({ destination, pretty: false }), lines };
}

const read = (dir: string, name: string) => readFile(join(dir, 'fs', 'inotify', name), 'utf8').then((s) => s.trim());

test('a limit below its floor is raised, one above it is left alone, and each raise is logged once', async (t) => {
  const dir = await fakeProcSys(t, '128', '1048576');
  const { log, lines } = capture();
  const changed = await raiseKernelLimits(log, dir);
  assert.deepEqual(changed, [
    { key: 'fs.inotify.max_user_instances', from: 128, to: KERNEL_LIMITS['fs.inotify.max_user_instances'] },
  ]);
  assert.equal(await read(dir, 'max_user_instances'), '8192');
  assert.equal(await read(dir, 'max_user_watches'), '1048576', 'never lowered');
  assert.deepEqual(
    lines.map((l) => l.msg),
    ['raised fs.inotify.max_user_instances from 128 to 8192'],
  );
  assert.deepEqual(await raiseKernelLimits(log, dir), [], 'a second start changes nothing');
});

test('a limit kctl cannot write is a warning that names the sysctl to set, not a failure', async (t) => {
  const dir = await fakeProcSys(t, '8192', '1000');
  // A read-only sysctl even for root (its value, 40 or so, is below the floor).
  const watches = join(dir, 'fs', 'inotify', 'max_user_watches');
  await rm(watches);
  await symlink('/proc/sys/kernel/cap_last_cap', watches);
  const { log, lines } = capture();
  assert.deepEqual(await raiseKernelLimits(log, dir), []);
  assert.equal(lines.length, 1);
  assert.equal(lines[0]!.level, 40, 'warn');
  assert.match(
    lines[0]!.msg,
    /^fs\.inotify\.max_user_watches is \d+ and kctl cannot raise it \(.+\); set fs\.inotify\.max_user_watches=524288 on this host/,
  );
});
