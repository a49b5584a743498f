// The kernel's table of the TCP sockets of this network namespace (/proc/net/tcp and tcp6): the
// state of sockets kctl does not hold, such as who listens on a port, or the other end of a
// connection to a program on this host.
import { readFile } from 'node:fs/promises';
import { endianness } from 'node:os';
import { ipKey } from './addresses.ts';

/** The kernel's TCP states kctl looks for (include/net/tcp_states.h): the table's numbers, TCP_INFO's too. */
export const TcpState = { ESTABLISHED: 1, FIN_WAIT1: 4, FIN_WAIT2: 5, LAST_ACK: 9, LISTEN: 10, CLOSING: 11 } as const;

export interface TcpEndpoint {
  /** ipKey's form: IPv4 as IPv4-mapped IPv6, 32 hex digits. */
  ip: string;
  port: number;
}

export interface TcpEntry {
  local: TcpEndpoint;
  remote: TcpEndpoint;
  state: number;
  /** The socket's inode; "0" once no program holds it (closed, its last bytes still on their way). */
  inode: string;
}

/** Every TCP socket of this network namespace, IPv4 and IPv6; empty where /proc cannot be read. */
export async function tcpTable(): Promise<TcpEntry[]> {
  const out: TcpEntry[] = [];
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    const text = await readFile(table, 'utf8').catch(() => '');
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      const [local, remote, state, inode] = [endpoint(f[1]), endpoint(f[2]), f[3], f[9]];
      if (local && remote && state && inode) out.push({ local, remote, state: Number.parseInt(state, 16), inode });
    }
  }
  return out;
}

/** The table prints each 32-bit word of an address as this host stores it: bytes reversed on x86 and arm64. */
const REVERSE_WORDS = endianness() === 'LE';

/** "0100007F:1F90" (IPv4, 127.0.0.1 port 8080) or 32 hex digits and a port (IPv6). */
function endpoint(text: string | undefined): TcpEndpoint | undefined {
  const m = /^([0-9A-F]{8}|[0-9A-F]{32}):([0-9A-F]{4})$/.exec(text ?? '');
  if (!m) return undefined;
  const words = m[1]!
    .match(/.{8}/g)!
    .map((w) => (REVERSE_WORDS ? Buffer.from(w, 'hex').reverse().toString('hex') : w.toLowerCase()));
  const ip = words.length === 1 ? `${'0'.repeat(20)}ffff${words[0]}` : words.join('');
  return { ip, port: Number.parseInt(m[2]!, 16) };
}

/** States in which a socket's program has closed it (orphaned, inode 0) with its FIN sent or queued. */
const CLOSED_BY_PROGRAM = new Set<number>([
  TcpState.FIN_WAIT1,
  TcpState.FIN_WAIT2,
  TcpState.CLOSING,
  TcpState.LAST_ACK,
]);

/**
 * Whether the other end of our connection from `local` to `remote` is a socket of this network
 * namespace whose program has closed it: what we write then draws a reset, which throws away
 * whatever it still had to send us. Undefined when the table does not hold it (another host or
 * namespace, or gone).
 */
export async function peerClosedByProgram(
  local: { address: string; port: number },
  remote: { address: string; port: number },
): Promise<boolean | undefined> {
  const [ours, theirs] = [ipKey(local.address), ipKey(remote.address)];
  if (ours === null || theirs === null) return undefined;
  const peer = (await tcpTable()).find(
    (e) =>
      e.local.ip === theirs &&
      e.local.port === remote.port &&
      e.remote.ip === ours &&
      e.remote.port === local.port &&
      e.state !== TcpState.LISTEN,
  );
  return peer ? peer.inode === '0' && CLOSED_BY_PROGRAM.has(peer.state) : undefined;
}
