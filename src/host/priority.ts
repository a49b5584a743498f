// A start that goes first on a busy host. A named cluster that starts on a host where other
// clusters run shares the CPU with all of them; its kube-apiserver's first start is hundreds of
// small sequential writes, each of which waits its turn behind every other process's work. Like
// systemd's StartupCPUWeight=, kctl raises its own CPU priority while its cluster starts (the
// processes it starts meanwhile inherit it) and, once the cluster is ready, lowers every thread of
// itself and of those processes back to where it was.
import { getPriority, setPriority } from 'node:os';
import { readdir, readFile } from 'node:fs/promises';
import { reasonOf } from '../base/errors.ts';
import type { Logger } from '../base/log.ts';
import { statFields } from '../supervisor/pidfile.ts';

/** How much nicer than before a starting cluster runs: nice -5 weighs about three times nice 0. */
export const START_BOOST = 5;

/** Ends a start boost: every thread of this process and its descendants back at the nice it had. */
export type EndBoost = () => Promise<void>;

/**
 * Raises this thread's CPU priority by START_BOOST (the threads and processes it creates from now
 * on inherit it). Without the right to (no CAP_SYS_NICE), logs that once and does nothing.
 */
export function boostStart(log: Logger): EndBoost {
  const before = getPriority(0);
  try {
    setPriority(0, before - START_BOOST);
  } catch (err) {
    log.info({ reason: reasonOf(err) }, 'the start runs at normal CPU priority: kctl may not raise it here');
    return async () => undefined;
  }
  return async () => {
    const boosted = before - START_BOOST;
    for (const pid of await descendants(process.pid))
      for (const tid of await readdir(`/proc/${pid}/task`).catch(() => [] as string[])) {
        // Only threads that still carry the boost: one that changed its own priority keeps it.
        if ((await niceOf(pid, tid)) === boosted) trySetPriority(Number(tid), before);
      }
    log.info({ nice: before }, 'the cluster is ready: its processes are back at their normal CPU priority');
  };
}

function trySetPriority(tid: number, nice: number): void {
  try {
    setPriority(tid, nice);
  } catch {
    // the thread has ended since it was listed
  }
}

/** The nice value of one thread (field 19 of /proc/PID/task/TID/stat), or undefined once it is gone. */
async function niceOf(pid: number, tid: string): Promise<number | undefined> {
  const stat = await readFile(`/proc/${pid}/task/${tid}/stat`, 'utf8').catch(() => undefined);
  if (stat === undefined) return undefined;
  return Number(statFields(stat)[19 - 3]);
}

/** `root` and every process below it, from the parent pids in /proc. */
export async function descendants(root: number): Promise<number[]> {
  const children = new Map<number, number[]>();
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    const ppid = Number(statFields(stat)[4 - 3]);
    children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
  }
  const tree = [root];
  for (let i = 0; i < tree.length; i++) tree.push(...(children.get(tree[i]!) ?? []));
  return tree;
}
