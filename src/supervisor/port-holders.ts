// Who listens on a TCP port: the kernel's TCP table gives the listening socket's inode,
// /proc/<pid>/fd the process holding it. Used to say "port 6443 is in use by pid 812
// (kube-apiserver)" and to tell a port held by a stale child of kctl itself (cleaned up at start)
// from a stranger's; and, when a supervised child exits because its port is taken, which process
// took it.
import { readFile, readdir, readlink } from 'node:fs/promises';
import { tcpTable, TcpState } from '../base/tcp-table.ts';

async function listeningInodes(port: number): Promise<Set<string>> {
  const listening = (await tcpTable()).filter((e) => e.state === TcpState.LISTEN && e.local.port === port);
  return new Set(listening.map((e) => e.inode));
}

export interface PortHolder {
  pid: number;
  /** The process's name (comm), when readable. */
  name?: string;
}

/** The processes listening on `port` (any address); empty when none. A pid may show once per socket. */
export async function portHolders(port: number): Promise<PortHolder[]> {
  const inodes = await listeningInodes(port);
  if (inodes.size === 0) return [];
  const out: PortHolder[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const fds = await readdir(`/proc/${entry}/fd`).catch(() => [] as string[]);
    for (const fd of fds) {
      const target = await readlink(`/proc/${entry}/fd/${fd}`).catch(() => '');
      const m = /^socket:\[(\d+)\]$/.exec(target);
      if (m && inodes.has(m[1]!)) {
        const name = (await readFile(`/proc/${entry}/comm`, 'utf8').catch(() => '')).trim() || undefined;
        out.push({ pid: Number(entry), name });
        break;
      }
    }
  }
  // A socket in another pid namespace (or a process gone meanwhile) still holds the port.
  return out.length > 0 ? out : [{ pid: 0 }];
}

/** Go's net.Listen error, as kube-apiserver, etcd, kine and kubelet print it. */
const BIND_IN_USE = /listen tcp[46]? (\S+):(\d+): bind: address already in use/;

/** "port 16000 (0.0.0.0) is held by pid 812 (nc)": what stops a child from listening, for its error. */
export async function busyPortReason(busy: { address: string; port: number }): Promise<string> {
  const holders = (await portHolders(busy.port).catch(() => [])).filter((h) => h.pid > 0);
  const by = holders.length
    ? holders.map((h) => `pid ${h.pid}${h.name ? ` (${h.name})` : ''}`).join(', ')
    : 'a process kctl cannot see (another network namespace, or one that already exited)';
  return `port ${busy.port} (${busy.address}) is held by ${by}; free it`;
}

/** The address in a Go program's "bind: address already in use" line, or undefined. */
export function bindConflict(line: string): { address: string; port: number } | undefined {
  const m = BIND_IN_USE.exec(line);
  return m ? { address: m[1]!, port: Number(m[2]) } : undefined;
}
