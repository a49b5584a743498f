// What processes cost in memory, as the kernel counts it: PSS (proportional set size), so pages
// that several processes share (one staged copy of kube-apiserver run by many control planes)
// are split between them instead of counted once per process.
import { readFile } from 'node:fs/promises';

/** PSS of one process in KiB; 0 when it is gone or unreadable. */
export async function pssKiB(pid: number): Promise<number> {
  const text = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => '');
  return Number(/^Pss:\s+(\d+) kB/m.exec(text)?.[1] ?? 0);
}

/** The PSS of several processes together, in KiB. */
export async function totalPssKiB(pids: number[]): Promise<number> {
  return (await Promise.all(pids.map(pssKiB))).reduce((a, b) => a + b, 0);
}
