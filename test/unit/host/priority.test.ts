// The start boost: a named cluster's kctl and what it starts run at a higher CPU priority until
// the cluster is ready, then every one of their threads goes back.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { getPriority } from 'node:os';
import { test } from 'node:test';
import { boostStart, descendants, START_BOOST } from '../../../src/host/priority.ts';
import { statFields } from '../../../src/supervisor/pidfile.ts';
import { captureLogger } from '../../helpers.ts';

/** The nice value of every thread of `pid`. */
async function threadNices(pid: number): Promise<number[]> {
  const tids = await readdir(`/proc/${pid}/task`);
  return Promise.all(
    tids.map(async (tid) => {
      return Number(statFields(await readFile(`/proc/${pid}/task/${tid}/stat`, 'utf8'))[19 - 3]);
    }),
  );
}

test(
  'a boosted start: children inherit the raised priority, and its end brings them and this thread back',
  { skip: process.getuid?.() !== 0 && 'needs root: raising a priority takes CAP_SYS_NICE' },
  async (t) => {
    const before = getPriority(0);
    const { log, lines } = captureLogger();
    const end = boostStart(log);
    t.after(end);
    assert.equal(getPriority(0), before - START_BOOST, 'this thread runs boosted');
    // A shell with a child of its own: grandchildren are found too.
    const child = spawn('sh', ['-c', 'sleep 30 & wait'], { stdio: 'ignore' });
    t.after(() => child.kill('SIGKILL'));
    await new Promise((r) => setTimeout(r, 200));
    const tree = await descendants(child.pid!);
    assert.equal(tree.length, 2, `sh and its sleep: ${tree.join(' ')}`);
    for (const pid of tree) assert.deepEqual([...new Set(await threadNices(pid))], [before - START_BOOST]);

    await end();
    assert.equal(getPriority(0), before);
    for (const pid of tree) assert.deepEqual([...new Set(await threadNices(pid))], [before]);
    assert.ok(lines().some((l) => /back at their normal CPU priority/.test(String(l.msg))));
    const sleepPid = tree[1]!;
    child.kill('SIGKILL');
    process.kill(sleepPid, 'SIGKILL');
  },
);
