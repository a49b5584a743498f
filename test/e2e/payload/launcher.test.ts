// dist/kctl starts with a launcher that unpacks the compressed Node runtime once and execs it:
// the runtime lands checked by sha256, is not unpacked or hashed again while unchanged, is
// unpacked again when changed, and a damaged executable or an unsafe runtime directory is one
// line with nothing left behind.
import assert from 'node:assert/strict';
import { execa } from 'execa';
import { createHash } from 'node:crypto';
import {
  chmod,
  chown,
  copyFile,
  mkdir,
  open,
  readdir,
  readFile,
  stat,
  truncate,
  utimes,
  writeFile,
} from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { readEmbeddedPayload } from '../../../src/payload/payload.ts';
import { tempDir } from '../../helpers.ts';
import { freePort } from '../../ports.ts';
import { kctl, requireKctl } from '../lab/kctl.ts';

const sha = async (p: string) =>
  createHash('sha256')
    .update(await readFile(p))
    .digest('hex');

async function runtimeOf(exe: string) {
  const runtime = (await readEmbeddedPayload(exe))?.runtime;
  assert.ok(runtime, `${exe} has no launcher runtime in its trailer`);
  return runtime;
}

async function flipByte(file: string, pos: number): Promise<void> {
  const fh = await open(file, 'r+');
  const byte = Buffer.alloc(1);
  await fh.read(byte, 0, 1, pos);
  byte[0] = byte[0]! ^ 0xff;
  await fh.write(byte, 0, 1, pos);
  await fh.close();
}

function oneLine(stderr: unknown): string {
  const lines = String(stderr).trim().split('\n');
  assert.equal(lines.length, 1, `expected one line, got:\n${String(stderr)}`);
  return lines[0]!;
}

/** Waits until some process holds a lock on `dir` (the flock command has taken it). */
async function waitForLock(dir: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const probe = await execa('flock', ['--exclusive', '--nonblock', dir, 'true'], { reject: false });
    if (probe.exitCode !== 0) return;
    await new Promise((res) => setTimeout(res, 50));
  }
  assert.fail(`nothing took the lock on ${dir}`);
}

test('the launcher unpacks the runtime once, checked by sha256, and runs it with the command line the user typed', async (t) => {
  const dir = await tempDir(t);
  const env = { KCTL_RUNTIME_DIR: join(dir, 'runtime') };
  const exe = requireKctl();
  const runtime = await runtimeOf(exe);
  const file = join(env.KCTL_RUNTIME_DIR, runtime.sha256, 'kctl');
  // What earlier builds left: one runtime that no process runs, one that a process still runs,
  // one whose launcher is between its check and its exec (it holds a shared lock on the
  // directory), all checked an hour ago, and the previous build's, checked last (an upgrade's
  // rollback starts it again).
  const stale = join(env.KCTL_RUNTIME_DIR, 'a'.repeat(64));
  const running = join(env.KCTL_RUNTIME_DIR, 'b'.repeat(64));
  const starting = join(env.KCTL_RUNTIME_DIR, 'c'.repeat(64));
  const previous = join(env.KCTL_RUNTIME_DIR, 'd'.repeat(64));
  const hourAgo = new Date(Date.now() - 3600_000);
  for (const d of [stale, running, starting, previous]) {
    await mkdir(d, { recursive: true });
    await copyFile('/bin/sleep', join(d, 'kctl'));
    await writeFile(join(d, 'kctl.stamp'), 'old\n');
    if (d !== previous) await utimes(join(d, 'kctl.stamp'), hourAgo, hourAgo);
  }
  const sleeper = execa(join(running, 'kctl'), ['300'], { reject: false });
  t.after(() => sleeper.kill('SIGKILL'));
  const locker = execa('flock', ['--shared', starting, 'sleep', '300'], { reject: false });
  t.after(() => locker.kill('SIGKILL'));
  await waitForLock(starting);

  const r = await kctl(['version', '-o', 'json'], { env });
  assert.equal(r.exitCode, 0, String(r.stderr));
  const out = JSON.parse(String(r.stdout)) as { runtime?: { path: string; sha256: string; node: string } };
  assert.deepEqual({ path: out.runtime?.path, sha256: out.runtime?.sha256 }, { path: file, sha256: runtime.sha256 });
  assert.equal(await sha(file), runtime.sha256);
  assert.equal((await stat(file)).mode & 0o777, 0o755);
  assert.ok(
    runtime.stored!.size < runtime.size / 2,
    `runtime stored in ${runtime.stored!.size} bytes for ${runtime.size}`,
  );
  // Unpacking a new build removed the old runtime nobody runs, and kept the one in use, the one
  // starting and the previous build's.
  assert.deepEqual(
    (await readdir(env.KCTL_RUNTIME_DIR)).sort(),
    [runtime.sha256, 'b'.repeat(64), 'c'.repeat(64), 'd'.repeat(64)].sort(),
  );
  for (const d of [running, starting, previous]) assert.deepEqual((await readdir(d)).sort(), ['kctl', 'kctl.stamp'], d);

  // A second start neither unpacks (same inode) nor hashes again (the stamp is not rewritten).
  const before = { file: (await stat(file)).ino, stamp: (await stat(`${file}.stamp`)).ino };
  assert.equal((await kctl(['version'], { env })).exitCode, 0);
  assert.deepEqual({ file: (await stat(file)).ino, stamp: (await stat(`${file}.stamp`)).ino }, before);

  // A running kctl: argv as typed (what ps shows), the unpacked runtime as its program, the launcher named for it.
  const [health, admin] = [await freePort(), await freePort()];
  await writeFile(join(dir, 'token'), 'not-a-real-token\n');
  const agent = execa(
    exe,
    [
      'konnectivity-agent',
      '--proxy-server-host=127.0.0.1',
      '--proxy-server-port=9',
      `--health-server-port=${health}`,
      `--admin-server-port=${admin}`,
      `--service-account-token-path=${join(dir, 'token')}`,
    ],
    { env, reject: false },
  );
  t.after(() => agent.kill('SIGKILL'));
  for (let i = 0; i < 100 && !(await fetch(`http://127.0.0.1:${health}/healthz`).catch(() => null)); i++)
    await new Promise((res) => setTimeout(res, 100));
  const pid = agent.pid!;
  assert.equal((await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0')[0], exe);
  assert.equal(await execa('readlink', [`/proc/${pid}/exe`]).then((x) => x.stdout), file);
  assert.ok((await readFile(`/proc/${pid}/environ`, 'utf8')).split('\0').includes(`KCTL_EXECUTABLE=${exe}`));
  // Private files by default, whatever the umask it was started with.
  assert.match(await readFile(`/proc/${pid}/status`, 'utf8'), /^Umask:\s+0077$/m);
});

test('an unpacked runtime that changed since it was checked is unpacked again', async (t) => {
  const dir = await tempDir(t);
  const env = { KCTL_RUNTIME_DIR: join(dir, 'cache', 'runtime') };
  const runtime = await runtimeOf(requireKctl());
  const file = join(env.KCTL_RUNTIME_DIR, runtime.sha256, 'kctl');
  // Started under kctl's own umask (the staging child is): the directories it makes get their mode all the same.
  const first = await execa('sh', ['-c', 'umask 077; exec "$0" "$@"', requireKctl(), 'version'], {
    env,
    reject: false,
  });
  assert.equal(first.exitCode, 0, String(first.stderr));
  for (const d of [join(dir, 'cache'), env.KCTL_RUNTIME_DIR, dirname(file)])
    assert.equal((await stat(d)).mode & 0o777, 0o755, d);
  await flipByte(file, Math.floor(runtime.size / 2));
  assert.notEqual(await sha(file), runtime.sha256);
  const r = await kctl(['version'], { env });
  assert.equal(r.exitCode, 0, String(r.stderr));
  assert.equal(await sha(file), runtime.sha256);
});

test('a damaged or truncated executable is refused in one line, leaving nothing in the runtime directory', async (t) => {
  const dir = await tempDir(t);
  const runtimeDir = join(dir, 'runtime');
  const env = { KCTL_RUNTIME_DIR: runtimeDir };
  const broken = join(dir, 'kctl');
  await copyFile(requireKctl(), broken);
  const runtime = await runtimeOf(broken);
  await flipByte(broken, runtime.offset! + Math.floor(runtime.stored!.size / 2));
  const r = await execa(broken, ['version'], { env, reject: false });
  assert.notEqual(r.exitCode, 0);
  // Which check a flipped byte trips depends on what it hits in the compressed stream, and that
  // differs from build to build (the code cache inside is made anew by each).
  assert.match(
    oneLine(r.stderr),
    /^kctl: the runtime inside .*\/kctl (is not valid zstd|does not match its sha256|is truncated|is longer than its trailer says); the executable is damaged, reinstall kctl$/,
  );
  assert.deepEqual(await readdir(runtimeDir), []);

  await truncate(broken, runtime.offset! + 1000);
  const cut = await execa(broken, ['version'], { env, reject: false });
  assert.notEqual(cut.exitCode, 0);
  assert.match(
    oneLine(cut.stderr),
    /^kctl: .*\/kctl carries no kctl runtime \(no payload trailer\); .* reinstall kctl$/,
  );
  assert.deepEqual(await readdir(runtimeDir), []);
});

test('a runtime directory that others can write to is refused in one line, and nothing is unpacked there', async (t) => {
  const dir = await tempDir(t);
  const runtimeDir = join(dir, 'shared');
  await mkdir(runtimeDir);
  await chmod(runtimeDir, 0o777);
  const r = await kctl(['version'], { env: { KCTL_RUNTIME_DIR: runtimeDir } });
  assert.notEqual(r.exitCode, 0);
  assert.match(
    oneLine(r.stderr),
    /^kctl: runtime directory .*\/shared .* must belong to uid 0 and be writable by no one else; fix it or set KCTL_RUNTIME_DIR$/,
  );
  assert.deepEqual(await readdir(runtimeDir), []);
});

test('a user other than root unpacks into their own cache directory', async (t) => {
  const dir = await tempDir(t);
  await chmod(dir, 0o755);
  const home = join(dir, 'home');
  await mkdir(home);
  await chown(home, 65534, 65534);
  const runtime = await runtimeOf(requireKctl());
  const r = await execa('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', requireKctl(), 'version'], {
    env: { HOME: home, PATH: process.env.PATH },
    extendEnv: false,
    reject: false,
  });
  assert.equal(r.exitCode, 0, String(r.stderr));
  const file = join(home, '.cache/kctl/runtime', runtime.sha256, 'kctl');
  const st = await stat(file);
  assert.deepEqual({ uid: st.uid, mode: st.mode & 0o777 }, { uid: 65534, mode: 0o755 });
  assert.equal(await sha(file), runtime.sha256);
});
