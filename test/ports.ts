// Free TCP ports for processes that tests and benchmarks start and tell where to listen.
//
// Picked below the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range, 32768 and
// up by default), where outgoing connections get their local ports: a port the kernel hands out
// for `listen(0)` comes from that range, and some connect() may take it before the process it
// was picked for listens on it (a bench run once failed at its start with EADDRINUSE that way).
// Below the range is also below 49152, which upstream's proxy-server requires of its ports.
import { readFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Server } from 'node:net';

const PICK_FROM = 20_000;

/** The first port of the kernel's ephemeral range (32768 when it cannot be read). */
function ephemeralStart(): number {
  try {
    const first = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    if (Number.isInteger(first) && first > 0) return first;
  } catch {
    /* not Linux, or no procfs: the default */
  }
  return 32_768;
}

/** A server listening on `port` of `host`, or undefined when the port is taken there. */
function holdPort(port: number, host: string): Promise<Server | undefined> {
  const s = createServer();
  return new Promise((r) => {
    s.once('error', () => r(undefined));
    s.listen(port, host, () => r(s));
  });
}

const release = (servers: Server[]): Promise<unknown> =>
  Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));

/** A random port from PICK_FROM to `last`. */
const pick = (last: number): number => PICK_FROM + Math.floor(Math.random() * (last - PICK_FROM + 1));

/** `n` distinct ports free on 127.0.0.1 right now (all held open together while they are picked). */
export async function freePorts(n: number): Promise<number[]> {
  const pickTo = ephemeralStart() - 1;
  if (pickTo - PICK_FROM < 1000)
    throw new Error(
      `the ephemeral port range starts at ${pickTo + 1}, leaving too few ports from ${PICK_FROM} to pick from; raise it in ip_local_port_range`,
    );
  const servers: Server[] = [];
  try {
    while (servers.length < n) {
      const s = await holdPort(pick(pickTo), '127.0.0.1');
      if (s) servers.push(s);
    }
    return servers.map((s) => (s.address() as AddressInfo).port);
  } finally {
    await release(servers);
  }
}

/** A port free on 127.0.0.1 right now, below the ephemeral range. */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0]!;
}

/** `n` consecutive ports free on all addresses right now, below the ephemeral range: the first. */
export async function freePortRange(n: number): Promise<number> {
  for (let attempt = 0; attempt < 100; attempt++) {
    const first = pick(ephemeralStart() - n);
    const servers: Server[] = [];
    try {
      for (let p = first; p < first + n; p++) {
        const s = await holdPort(p, '0.0.0.0');
        if (!s) break;
        servers.push(s);
      }
      if (servers.length === n) return first;
    } finally {
      await release(servers);
    }
  }
  throw new Error(`no ${n} consecutive free ports found from ${PICK_FROM}`);
}
