import assert from 'node:assert/strict';
import { copyFile, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { componentLogger } from '../../../src/base/log.ts';
import { readPidFile } from '../../../src/supervisor/pidfile.ts';
import { CHILD_PATH, type SupervisorOptions } from '../../../src/supervisor/options.ts';
import { Supervisor } from '../../../src/supervisor/process.ts';
import { captureLogger, tempDir } from '../../helpers.ts';
import { spawnProcess } from './util.ts';
import { alive, waitFor } from '../../wait.ts';

type TestContext = { after: (fn: () => Promise<void> | void) => void };

/** A supervisor stopped when the test ends, pass or fail. */
function supervise(t: TestContext, opts: Omit<SupervisorOptions, 'log'> & Partial<Pick<SupervisorOptions, 'log'>>) {
  const captured = captureLogger();
  // Named as the component manager names a component's logger.
  const sup = new Supervisor({
    stopTimeoutMs: 2000,
    ...opts,
    log: opts.log ?? componentLogger(captured.log, opts.name),
  });
  t.after(() => sup.stop());
  return { sup, lines: captured.lines };
}

const sh = (script: string) => ({ binary: '/bin/sh', args: ['-c', script] });
const byMsg = (lines: Record<string, unknown>[], msg: string) => lines.find((l) => l.msg === msg);

test('forwards stdout and stderr line by line with the component field and a level', { timeout: 15_000 }, async (t) => {
  const runDir = await tempDir(t);
  const { sup, lines } = supervise(t, {
    name: 'chatty',
    runDir,
    ...sh(
      [
        'echo "hello from child"',
        'echo "E1122 10:00:00.000000    1 x.go:1] klog error" >&2',
        'echo "W1122 10:00:00.000000    1 x.go:1] klog warning" >&2',
        `echo '{"level":"warn","ts":"2026-01-01T00:00:00Z","msg":"etcd says","key":"v"}'`,
        'printf "split-"; sleep 0.2; printf "line\\n"',
        'head -c 20000 /dev/zero | tr "\\0" x; echo',
        'echo after-long',
        'exec sleep 1000',
      ].join('\n'),
    ),
  });
  await sup.start();
  await waitFor('the last line', 5_000, () => byMsg(lines(), 'after-long'));

  const hello = byMsg(lines(), 'hello from child');
  assert.equal(hello?.component, 'chatty');
  assert.equal(hello?.level, 30);
  assert.equal(byMsg(lines(), 'E1122 10:00:00.000000    1 x.go:1] klog error')?.level, 50);
  assert.equal(byMsg(lines(), 'W1122 10:00:00.000000    1 x.go:1] klog warning')?.level, 40);
  const json = byMsg(lines(), 'etcd says');
  assert.equal(json?.level, 40);
  assert.deepEqual(json?.fields, { key: 'v' });
  assert.equal(json?.component, 'chatty');
  assert.ok(byMsg(lines(), 'split-line'), 'a line written in two chunks is one record');
  const long = lines().find((l) => typeof l.msg === 'string' && l.msg.startsWith('xxx'));
  assert.equal((long?.msg as string).length, 16 * 1024);
  assert.equal(long?.truncated, true);
  assert.equal(
    lines().filter((l) => typeof l.msg === 'string' && l.msg.startsWith('x')).length,
    1,
    'the rest of a long line is dropped, not split into more records',
  );
});

test('the child gets a clean environment: PATH plus its own variables only', { timeout: 15_000 }, async (t) => {
  process.env.KCTL_SUPERVISOR_TEST_SECRET = 'leaked';
  t.after(() => {
    delete process.env.KCTL_SUPERVISOR_TEST_SECRET;
  });
  const runDir = await tempDir(t);
  const { sup, lines } = supervise(t, {
    name: 'envcheck',
    runDir,
    env: { EXTRA: 'given' },
    ...sh(
      'echo "secret=${KCTL_SUPERVISOR_TEST_SECRET:-unset} extra=$EXTRA home=${HOME:-unset} path=$PATH"; exec sleep 1000',
    ),
  });
  await sup.start();
  const line = await waitFor('the env line', 5_000, () => lines().find((l) => String(l.msg).startsWith('secret=')));
  assert.equal(line.msg, `secret=unset extra=given home=unset path=${CHILD_PATH}`);
});

test(
  'a child gets the umask it is given, or else inherits the one of kctl, which keeps its own',
  { timeout: 15_000 },
  async (t) => {
    const runDir = await tempDir(t);
    const own = process.umask(0o077);
    t.after(() => {
      process.umask(own);
    });
    const given = supervise(t, {
      name: 'umask-given',
      runDir,
      umask: 0o022,
      ...sh('echo "umask=$(umask)"; exec sleep 1000'),
    });
    const inherited = supervise(t, {
      name: 'umask-inherited',
      runDir,
      ...sh('echo "umask=$(umask)"; exec sleep 1000'),
    });
    await given.sup.start();
    await inherited.sup.start();
    assert.equal(
      (await waitFor('the umask line', 5_000, () => given.lines().find((l) => String(l.msg).startsWith('umask=')))).msg,
      'umask=0022',
    );
    assert.equal(
      (await waitFor('the umask line', 5_000, () => inherited.lines().find((l) => String(l.msg).startsWith('umask='))))
        .msg,
      'umask=0077',
    );
    assert.equal(process.umask(0o077), 0o077, "kctl's own umask is back after the spawn");
  },
);

test(
  'secrets never reach the log or the last error: every line of the child has them replaced',
  { timeout: 45_000 },
  async (t) => {
    const runDir = await tempDir(t);
    const { sup, lines } = supervise(t, {
      name: 'db',
      runDir,
      secrets: ['s3cr%40t', 's3cr@t', '', 'p&w'],
      backoff: { initialMs: 60_000, maxMs: 60_000, resetAfterMs: 60_000 },
      ...sh(
        [
          'echo "connecting to postgres://kine:s3cr%40t@db:5432/kine"',
          // A Go program's JSON line: & is written \u0026.
          `echo '{"level":"error","msg":"cannot connect","err":"password p\\u0026w refused"}'`,
          'echo "password s3cr@t refused" >&2',
          'exit 1',
        ].join('\n'),
      ),
    });
    await sup.start();
    // Bounds, not timings: finding the port's holder reads every process's file table, which takes
    // seconds while other tests run many processes.
    await waitFor('the exit', 30_000, () => sup.status().state === 'restarting' && sup.status().lastError);
    const text = JSON.stringify(lines());
    assert.ok(!text.includes('s3cr') && !text.includes('p\\u0026w') && !text.includes('p&w'), text);
    assert.ok(byMsg(lines(), 'connecting to postgres://kine:***@db:5432/kine'), text);
    assert.deepEqual(byMsg(lines(), 'cannot connect')?.fields, { err: 'password *** refused' });
    assert.equal(sup.status().lastError, 'exited with code 1: password *** refused');
  },
);

test(
  'a child that cannot listen because another process holds its port says which port and which process, at error level',
  { timeout: 45_000 },
  async (t) => {
    const runDir = await tempDir(t);
    // The stranger: this test's own process holds the port.
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    t.after(() => new Promise<void>((resolve) => holder.close(() => resolve())));
    const port = (holder.address() as AddressInfo).port;
    const { sup, lines } = supervise(t, {
      name: 'apiserver',
      runDir,
      backoff: { initialMs: 60_000, maxMs: 60_000, resetAfterMs: 60_000 },
      // kube-apiserver's words, then more lines after them, as it prints them.
      ...sh(`echo "E1127 failed to listen on 127.0.0.1:${port}: listen tcp 127.0.0.1:${port}: bind: address already in use" >&2
      echo "Error: failed to run the server" >&2; exit 1`),
    });
    await sup.start();
    // Bounds, not timings: finding the port's holder reads every process's file table, which takes
    // seconds while other tests run many processes.
    await waitFor('the exit', 30_000, () => sup.status().state === 'restarting' && sup.status().lastError);
    const why = sup.status().lastError ?? '';
    assert.match(
      why,
      new RegExp(`^exited with code 1: port ${port} \\(127\\.0\\.0\\.1\\) is held by pid ${process.pid}\\b`),
      why,
    );
    const logged = lines().find((l) => typeof l.delayMs === 'number');
    assert.equal(logged?.level, 50);
    assert.match(String(logged?.msg), new RegExp(`^apiserver exited with code 1: port ${port} `));
  },
);

test(
  'a crashing child is restarted with capped exponential backoff that resets after a healthy run',
  { timeout: 20_000 },
  async (t) => {
    const runDir = await tempDir(t);
    const counter = join(runDir, 'runs');
    // Runs 1-3 crash at once, run 4 lives longer than resetAfterMs, then quick crashes again.
    const { sup, lines } = supervise(t, {
      name: 'crasher',
      runDir,
      backoff: { initialMs: 20, maxMs: 80, resetAfterMs: 400 },
      ...sh(`n=$(cat ${counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > ${counter}
      echo "run $n"; if [ $n -eq 4 ]; then sleep 1; fi; echo "boom $n" >&2; exit 3`),
    });
    await sup.start();
    await waitFor('six runs', 15_000, () => lines().some((l) => l.msg === 'run 6'));
    await sup.stop();

    const delays = lines()
      .filter((l) => typeof l.delayMs === 'number')
      .map((l) => l.delayMs);
    assert.deepEqual(delays.slice(0, 5), [20, 40, 80, 20, 40]);
    const st = sup.status();
    assert.ok(st.restarts >= 5, `restarts counted: ${st.restarts}`);
    assert.match(st.lastError ?? '', /^exited with code 3: boom \d+$/);
    const crashLog = lines().find((l) => typeof l.delayMs === 'number');
    assert.equal(crashLog?.level, 40);
    assert.equal(crashLog?.code, 3);
    assert.equal(crashLog?.msg, 'crasher exited with code 3, restarting in 20ms');

    // Stopped means stopped: no restart afterwards.
    const runs = await readFile(counter, 'utf8');
    await sleep(300);
    assert.equal(await readFile(counter, 'utf8'), runs);
    assert.equal(sup.status().state, 'stopped');
  },
);

test(
  'stop escalates to SIGKILL for a child that ignores SIGTERM, removes the pid file, and is idempotent',
  { timeout: 15_000 },
  async (t) => {
    const runDir = await tempDir(t);
    const { sup, lines } = supervise(t, {
      name: 'stubborn',
      runDir,
      stopTimeoutMs: 300,
      ...sh('trap "" TERM; echo trapped; exec sleep 1000'),
    });
    await sup.start();
    await waitFor('the trap', 5_000, () => byMsg(lines(), 'trapped'));
    const pid = sup.status().pid as number;
    assert.equal(await readPidFile(join(runDir, 'stubborn.pid')), pid);

    await Promise.all([sup.stop(), sup.stop()]);
    await sup.stop();
    assert.equal(await alive(pid), false);
    assert.equal(await readPidFile(join(runDir, 'stubborn.pid')), undefined);
    assert.ok(lines().some((l) => String(l.msg).includes('after SIGTERM, sending SIGKILL')));
    assert.ok(lines().some((l) => l.signal === 'SIGKILL'));
    assert.deepEqual(sup.status(), { name: 'stubborn', state: 'stopped', restarts: 0 });
  },
);

test('a child that honours SIGTERM stops without SIGKILL', { timeout: 15_000 }, async (t) => {
  const runDir = await tempDir(t);
  const { sup, lines } = supervise(t, { name: 'polite', runDir, binary: '/bin/sleep', args: ['1000'] });
  await sup.start();
  const st = sup.status();
  assert.equal(st.state, 'running');
  assert.equal(typeof st.pid, 'number');
  assert.equal(st.uptimeSeconds, 0);
  await sup.stop();
  assert.ok(lines().some((l) => l.signal === 'SIGTERM'));
  assert.ok(!lines().some((l) => String(l.msg).includes('SIGKILL')));
});

test(
  'on start, a leftover of our binary is stopped; a foreign process behind a stale pid file is left alone',
  { timeout: 20_000 },
  async (t) => {
    const runDir = await tempDir(t);
    const binary = join(runDir, 'fake-daemon');
    await copyFile('/bin/sleep', binary);
    const pidFile = join(runDir, 'daemon.pid');

    // A leftover from a "previous kctl", whose binary was since replaced by an upgrade:
    // /proc/<pid>/exe reads "<binary> (deleted)" and argv[0] is something else.
    const leftover = await spawnProcess(t, binary, ['1000'], { argv0: 'leftover', detached: true });
    await rm(binary);
    await copyFile('/bin/sleep', binary);
    await writeFile(pidFile, `${leftover}\n`);
    const first = supervise(t, { name: 'daemon', runDir, binary, args: ['1000'], stopTimeoutMs: 1000 });
    await first.sup.start();
    assert.equal(await alive(leftover), false, 'the leftover of our binary is gone');
    const ours = first.sup.status().pid;
    assert.notEqual(ours, leftover);
    assert.equal(await readPidFile(pidFile), ours);
    assert.ok(first.lines().some((l) => String(l.msg).startsWith('stopping leftover') && l.pid === leftover));
    await first.sup.stop();

    // A reused pid: some other program now has the pid from the file.
    const foreign = await spawnProcess(t, '/bin/sleep', ['1000']);
    await writeFile(pidFile, `${foreign}\n`);
    const second = supervise(t, { name: 'daemon', runDir, binary, args: ['1000'] });
    await second.sup.start();
    assert.equal(await alive(foreign), true, 'the foreign process is untouched');
    assert.equal(await readPidFile(pidFile), second.sup.status().pid);
    assert.ok(
      second.lines().some((l) => String(l.msg).includes('is another program, leaving it alone') && l.pid === foreign),
    );
    await second.sup.stop();

    // A dead pid: the file just goes.
    await writeFile(pidFile, '999999999\n');
    const third = supervise(t, { name: 'daemon', runDir, binary, args: ['1000'] });
    await third.sup.start();
    assert.equal(await readPidFile(pidFile), third.sup.status().pid);
    await third.sup.stop();
  },
);

test('ready() retries the probe until it passes', { timeout: 15_000 }, async (t) => {
  const runDir = await tempDir(t);
  const marker = join(runDir, 'up');
  let probes = 0;
  const { sup } = supervise(t, {
    name: 'slow',
    runDir,
    readyRetryMs: 20,
    ...sh(`sleep 0.3; touch ${marker}; exec sleep 1000`),
    ready: async () => {
      probes++;
      await readFile(marker);
    },
  });
  await sup.start();
  await sup.ready(AbortSignal.timeout(10_000));
  assert.ok(probes > 1, `probed ${probes} times`);
});

test(
  'ready() rejects with the last probe error and the crash reason when the signal aborts',
  { timeout: 15_000 },
  async (t) => {
    const runDir = await tempDir(t);
    const { sup } = supervise(t, {
      name: 'never',
      runDir,
      readyRetryMs: 20,
      binary: '/bin/sleep',
      args: ['1000'],
      ready: () => Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:2379')),
    });
    await sup.start();
    await assert.rejects(sup.ready(AbortSignal.timeout(300)), {
      message: 'last probe error: connect ECONNREFUSED 127.0.0.1:2379',
    });

    const crashing = supervise(t, {
      name: 'crashloop',
      runDir,
      backoff: { initialMs: 20, maxMs: 20, resetAfterMs: 60_000 },
      ...sh('echo "bad flag --foo" >&2; exit 2'),
      ready: () => Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:2379')),
    }).sup;
    await crashing.start();
    await waitFor('a restart', 5_000, () => crashing.status().restarts > 0);
    await assert.rejects(
      crashing.ready(AbortSignal.timeout(300)),
      /restarts, last: exited with code 2: bad flag --foo/,
    );
    // Stop the crash loop before the run dir is removed (after-hooks run first-added first).
    await crashing.stop();
    await sup.stop();
  },
);

test('start fails with one line for a missing binary', { timeout: 15_000 }, async (t) => {
  const runDir = await tempDir(t);
  const { sup } = supervise(t, { name: 'ghost', runDir, binary: join(runDir, 'nope'), args: [] });
  await assert.rejects(sup.start(), { message: `${join(runDir, 'nope')} is missing or not executable` });
  assert.equal(sup.status().state, 'failed');
  assert.throws(
    () => new Supervisor({ name: 'rel', binary: 'sleep', args: [], runDir, log: captureLogger().log }),
    /absolute path/,
  );
});

test(
  'restart() stops the child and starts it again at once, counted, without backoff or an error',
  { timeout: 15_000 },
  async (t) => {
    const runDir = await tempDir(t);
    const { sup, lines } = supervise(t, {
      name: 'renewed',
      runDir,
      ...sh('exec sleep 1000'),
      backoff: { initialMs: 5000, maxMs: 5000, resetAfterMs: 60_000 },
    });
    await sup.start();
    await sup.ready(AbortSignal.timeout(5000));
    const first = sup.status().pid!;
    const started = Date.now();
    await sup.restart('new credentials');
    await sup.ready(AbortSignal.timeout(5000));
    // Well under the 5 s backoff a crash would wait.
    assert.ok(Date.now() - started < 3000);
    const s = sup.status();
    assert.notEqual(s.pid, first);
    assert.equal(await alive(first), false);
    assert.equal(s.restarts, 1);
    assert.equal(s.lastError, undefined);
    assert.equal(await readPidFile(join(runDir, 'renewed.pid')), s.pid);
    assert.ok(lines().some((l) => l.msg === 'restarting renewed: new credentials'));
    // Not running: nothing to restart.
    await sup.stop();
    await sup.restart('again');
    assert.equal(sup.status().state, 'stopped');
  },
);
