// Messages to systemd (through a stand-in for systemd-notify that records its arguments): the
// watchdog is pinged at once, not only after the first interval, and not by a process the
// watchdog is not for.
import assert from 'node:assert/strict';
import { chmod, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { SystemdNotifier } from '../../../src/supervisor/notify.ts';
import { tempDir } from '../../helpers.ts';
import { quietLogger } from '../konnectivity/fixtures.ts';
import { waitFor } from '../../wait.ts';

/** A systemd-notify that appends its arguments, one call per line, to `sent`. */
async function fakeNotify(t: TestContext): Promise<{ command: string; sent: () => Promise<string[]> }> {
  const dir = await tempDir(t, 'kctl-notify-');
  const command = join(dir, 'systemd-notify');
  const log = join(dir, 'sent');
  await writeFile(command, `#!/bin/sh\necho "$*" >> "${log}"\n`);
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
