import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { copyFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { runsBinary } from '../../../src/supervisor/pidfile.ts';
import { tempDir } from '../../helpers.ts';
import { killAfter } from './util.ts';
import { alive, waitFor } from '../../wait.ts';

const parentScript = new URL('./fixtures/supervising-parent.ts', import.meta.url).pathname;

test('no orphan: when the supervising process is SIGKILLed, its child dies too', { timeout: 30_000 }, async (t) => {
  const runDir = await tempDir(t);
  const binary = join(runDir, 'orphan-candidate');
  await copyFile('/bin/sleep', binary);

  const parent = spawn(process.execPath, ['--import', 'tsx', parentScript, runDir, binary, '1000'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  killAfter(t, parent.pid);
  const firstLine = createInterface({ input: parent.stdout! })[Symbol.asyncIterator]().next();
  const { value } = await Promise.race([
    firstLine,
    once(parent, 'exit').then(([code]) => {
      throw new Error(`parent exited early with ${code}`);
    }),
  ]);
  const child = Number(value);
  killAfter(t, child);
  assert.ok(Number.isInteger(child) && child > 1, `child pid from parent: ${value}`);
  assert.equal(await alive(child), true);
  // The tracked pid is the real child, not setpriv: setpriv execs the binary in place, which a
  // loaded machine may not have done yet when the pid is printed; a wrapper that forked never would.
  await waitFor('the tracked pid to run the binary, not setpriv', 5_000, () => runsBinary(child, binary));

  parent.kill('SIGKILL');
  await once(parent, 'exit');
  await waitFor('the orphaned child to die', 10_000, async () => !(await alive(child)));
});
