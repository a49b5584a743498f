// iproute2 and iptables as kctl runs them: a fixed PATH and no inherited environment, a bounded
// time, and the command's own words in the error.
import { execa } from 'execa';

export const SYSTEM_PATH_ENV = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' };

async function run(cmd: string, args: string[]): Promise<string> {
  const r = await execa(cmd, args, { reject: false, extendEnv: false, env: SYSTEM_PATH_ENV, timeout: 10_000 });
  if (r.exitCode !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${String(r.stderr).trim() || `exit ${r.exitCode}`}`);
  return String(r.stdout);
}

/** `ip ARGS`; resolves to its output, rejects with its error text. */
export const ip = (args: string[]): Promise<string> => run('ip', args);
/** `bridge ARGS` (iproute2's FDB tool). */
export const bridgeTool = (args: string[]): Promise<string> => run('bridge', args);

/**
 * Gives `dev` exactly one IPv4 address, `address`/32, flushing any other; none when `address` is
 * undefined. With `label` (DEV:NAME) only the addresses of that label are kctl's: the node-local
 * API address sits on lo that way (some kernels are built without the dummy driver, and a local
 * address on lo is local all the same) beside lo's own.
 */
export async function setOnlyAddress(dev: string, address: string | undefined, label?: string): Promise<void> {
  const which = ['dev', dev, ...(label ? ['label', label] : [])];
  const held = ipJson<{ addr_info?: { local?: string; prefixlen?: number }[] }>(
    await ip(['-j', '-4', 'addr', 'show', ...which]),
  )
    .flatMap((l) => l.addr_info ?? [])
    .filter((a) => a.local !== undefined)
    .map((a) => `${a.local}/${a.prefixlen}`);
  const want = address ? [`${address}/32`] : [];
  if (held.length === want.length && held.every((h, i) => h === want[i])) return;
  if (held.length) await ip(['addr', 'flush', ...which]);
  if (address) await ip(['addr', 'add', `${address}/32`, 'dev', dev, ...(label ? ['label', label] : [])]);
}

/** `ip ARGS` that says whether it succeeded instead of rejecting. */
export const ipSucceeds = (args: string[]): Promise<boolean> =>
  ip(args).then(
    () => true,
    () => false,
  );

/** True when the link exists (in this network namespace). */
export const linkExists = (dev: string): Promise<boolean> => ipSucceeds(['link', 'show', dev]);

/** `iptables -w 5 -t TABLE ARGS`, never rejects: ok, its output and its error text. */
export async function iptables(
  table: string,
  args: string[],
): Promise<{ ok: boolean; stdout: string; stderr: string }> {
  const r = await execa('iptables', ['-w', '5', '-t', table, ...args], {
    reject: false,
    extendEnv: false,
    env: SYSTEM_PATH_ENV,
  });
  return { ok: r.exitCode === 0, stdout: String(r.stdout), stderr: String(r.stderr).trim() };
}

/** Parses `ip -j ...` output (empty output is an empty list). */
export function ipJson<T>(out: string): T[] {
  return out.trim() ? (JSON.parse(out) as T[]) : [];
}

/**
 * Drops the conntrack entries of connections from `source` (a CIDR) to `destination`, so their next
 * packets are routed and translated afresh. Best effort: without the conntrack tool (kube-proxy
 * wants it too) or with nothing to drop, nothing happens.
 */
export async function forgetConnections(source: string, destination: string): Promise<void> {
  await execa('conntrack', ['-D', '-s', source, '-d', destination], {
    reject: false,
    extendEnv: false,
    env: SYSTEM_PATH_ENV,
    timeout: 10_000,
  });
}
