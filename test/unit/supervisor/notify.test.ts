// Messages to systemd (through a stand-in for systemd-notify that records its arguments): the
// watchdog is pinged at once, not only after the first interval, and not by a process the
// watchdog is not for; a slow helper never holds a ping behind a backlog of progress lines, and
// is logged (so a watchdog kill has a reason in the journal).
import assert from 'node:assert/strict';
import { chmod, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { SystemdNotifier } from '../../../src/supervisor/notify.ts';
import { captureLogger, tempDir } from '../../helpers.ts';
import { quietLogger } from '../konnectivity/fixtures.ts';
import { waitFor } from '../../wait.ts';

/** A systemd-notify that appends its arguments, one call per line, to `sent`. */
async function fakeNotify(t: TestContext, delay = 0): Promise<{ command: string; sent: () => Promise<string[]> }> {
  const dir = await tempDir(t, 'kctl-notify-');
  const command = join(dir, 'systemd-notify');
  const log = join(dir, 'sent');
  await writeFile(command, `#!/bin/sh\n${delay ? `sleep ${delay}\n` : ''}echo "$*" >> "${log}"\n`);
  await chmod(command, 0o755);
  const sent = async () => (await readFile(log, 'utf8').catch(() => '')).split('\n').filter(Boolean);
  return { command, sent };
}

test('the watchdog is pinged as soon as it starts, before any later message', async (t) => {
  const { command, sent } = await fakeNotify(t);
  // A 20 s watchdog: the timer alone would ping first after 10 s.
  const n = SystemdNotifier.forRole({
    env: { NOTIFY_SOCKET: '/x', WATCHDOG_USEC: '20000000' },
    command,
    log: quietLogger(),
  });
  assert.ok(n);
  t.after(() => n.close());
  await waitFor('the first WATCHDOG=1', 3000, async () => (await sent()).includes('WATCHDOG=1'));
  n.status('up');
  await waitFor('STATUS=up after the ping', 3000, async () => (await sent()).includes('STATUS=up'));
  assert.deepEqual(await sent(), ['WATCHDOG=1', 'STATUS=up']);
});

test('a watchdog meant for another process (WATCHDOG_PID) is not pinged; no NOTIFY_SOCKET, no notifier', async (t) => {
  const { command, sent } = await fakeNotify(t);
  const env = { NOTIFY_SOCKET: '/x', WATCHDOG_USEC: '200000', WATCHDOG_PID: String(process.pid + 1) };
  const n = SystemdNotifier.forRole({ env, command, log: quietLogger() });
  assert.ok(n);
  n.status('up');
  await waitFor('STATUS=up', 3000, async () => (await sent()).includes('STATUS=up'));
  await sleep(300); // three intervals of a 200 ms watchdog
  await n.close();
  assert.deepEqual(await sent(), ['STATUS=up']);
  assert.equal(SystemdNotifier.forRole({ env: { WATCHDOG_USEC: '200000' }, command, log: quietLogger() }), undefined);
});

test('a slow helper and a burst of progress: each call carries all that waits, the newest status and one ping', async (t) => {
  // Each call takes 0.3 s, as a spawn can on a loaded host; the watchdog wants a ping every 0.5 s.
  const { command, sent } = await fakeNotify(t, 0.3);
  const n = SystemdNotifier.forRole({
    env: { NOTIFY_SOCKET: '/x', WATCHDOG_USEC: '1000000' },
    command,
    log: quietLogger(),
  });
  assert.ok(n);
  t.after(() => n.close());
  for (let i = 0; i < 20; i++) n.status(`step ${i}`);
  await waitFor('the last status sent', 5000, async () => (await sent()).some((l) => l.includes('STATUS=step 19')));
  // The first ping and the 20 steps, queued before the first call started, went in that call: the
  // ping and only the newest step.
  assert.equal((await sent())[0], 'WATCHDOG=1 STATUS=step 19');
  // Pings keep going out about every 0.5 s while nothing else is sent: none waits behind another.
  const before = (await sent()).filter((l) => l.includes('WATCHDOG=1')).length;
  await sleep(2000);
  const pings = (await sent()).filter((l) => l.includes('WATCHDOG=1')).length - before;
  assert.ok(pings >= 3, `${pings} pings in 2 s`);
});

test('a helper slower than 2 s is logged with how long it took', async (t) => {
  const { command, sent } = await fakeNotify(t, 2.5);
  const { log, lines } = captureLogger();
  const n = SystemdNotifier.fromEnv({ env: { NOTIFY_SOCKET: '/x' }, command, log });
  assert.ok(n);
  t.after(() => n.close());
  n.status('slow');
  await waitFor('STATUS=slow', 6000, async () => (await sent()).includes('STATUS=slow'));
  await n.close();
  const slow = lines().find((l) => String(l.msg).includes('took long to deliver'));
  assert.ok(slow, JSON.stringify(lines()));
  assert.ok(Number(slow.tookMs) >= 2500, `tookMs ${String(slow.tookMs)}`);
});

test('a ping that runs late because the event loop was blocked is logged', async (t) => {
  const { command } = await fakeNotify(t);
  const { log, lines } = captureLogger();
  const n = SystemdNotifier.forRole({ env: { NOTIFY_SOCKET: '/x', WATCHDOG_USEC: '1000000' }, command, log });
  assert.ok(n);
  t.after(() => n.close());
  await sleep(700); // one ping on time
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 3000);
  await waitFor('the late ping logged', 3000, async () => lines().some((l) => String(l.msg).includes('ran late')));
  const late = lines().filter((l) => String(l.msg).includes('ran late'));
  assert.ok(
    late.some((l) => Number(l.lateMs) >= 2000),
    JSON.stringify(late),
  );
});
