// Kernel limits that many clusters on one host outgrow. Every kubelet, containerd, kube-apiserver
// and kube-controller-manager takes several inotify instances, and the kernel's default of 128
// per user is shared by everything root runs: a few clusters on one host use it up. What fails
// then fails quietly: containerd skips its CRI plugin ("too many open files" from its CNI config
// watcher) and kubelet restarts forever with "unknown service runtime.v1.RuntimeService".
// kctl raises these at start, never lowers them, and says so in one line.
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { reasonOf } from '../base/errors.ts';
import type { Logger } from '../base/log.ts';

/** The floors kctl raises to (the common Kubernetes-host settings). */
export const KERNEL_LIMITS: Readonly<Record<string, number>> = {
  'fs.inotify.max_user_instances': 8192,
  'fs.inotify.max_user_watches': 524288,
};

export interface LimitChange {
  key: string;
  from: number;
  to: number;
}

/** A sysctl's file: fs.inotify.max_user_instances is <procSys>/fs/inotify/max_user_instances. */
export const sysctlFile = (key: string, procSys = '/proc/sys') => join(procSys, ...key.split('.'));

/** The current value of a numeric sysctl, or undefined when it cannot be read. */
export async function readSysctl(key: string, procSys = '/proc/sys'): Promise<number | undefined> {
  const text = await readFile(sysctlFile(key, procSys), 'utf8').catch(() => undefined);
  const n = text === undefined ? Number.NaN : Number.parseInt(text.trim(), 10);
  return Number.isFinite(n) ? n : undefined;
}

/**
 * Raises each limit in KERNEL_LIMITS that is below its floor. A limit that cannot be raised (a
 * read-only /proc/sys in a container, no CAP_SYS_ADMIN) is a warning naming the sysctl to set,
 * not a failure: the host may be small enough not to need it.
 */
export async function raiseKernelLimits(log: Logger, procSys = '/proc/sys'): Promise<LimitChange[]> {
  const changed: LimitChange[] = [];
  for (const [key, floor] of Object.entries(KERNEL_LIMITS)) {
    const from = await readSysctl(key, procSys);
    if (from === undefined || from >= floor) continue;
    try {
      await writeFile(sysctlFile(key, procSys), String(floor));
      changed.push({ key, from, to: floor });
      log.info({ sysctl: key, from, to: floor }, `raised ${key} from ${from} to ${floor}`);
    } catch (err) {
      log.warn(
        { sysctl: key, value: from },
        `${key} is ${from} and kctl cannot raise it (${reasonOf(err)}); set ${key}=${floor} on this host, or containerd and kubelet may fail once several clusters share it`,
      );
    }
  }
  return changed;
}
