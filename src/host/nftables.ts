// nftables as kctl runs it: `nft -f -` with a fixed PATH, so a whole table is replaced in one
// transaction (the kernel applies all of it or none), and removed by name.
import { execa } from 'execa';
import { SYSTEM_PATH_ENV } from './ip.ts';

const INSTALL_HINT = 'install the nftables package (it provides nft)';

async function nft(args: string[], input?: string): Promise<void> {
  const r = await execa('nft', args, { input, reject: false, extendEnv: false, env: SYSTEM_PATH_ENV, timeout: 10_000 });
  if ((r as { code?: string }).code === 'ENOENT') throw new Error(`nft not found: ${INSTALL_HINT}`);
  if (r.exitCode !== 0)
    throw new Error(`nft ${args.join(' ')}: ${String(r.stderr).trim().split('\n')[0] || `exit ${r.exitCode}`}`);
}

/** Replaces `table inet NAME` with `body` (its chains and rules), atomically. */
export function replaceInetTable(name: string, body: string): Promise<void> {
  // Declaring the table first makes the delete succeed when it does not exist yet.
  return nft(['-f', '-'], `table inet ${name}\ndelete table inet ${name}\ntable inet ${name} {\n${body}}\n`);
}

/** Removes `table inet NAME` if it exists. */
export function removeInetTable(name: string): Promise<void> {
  return nft(['-f', '-'], `table inet ${name}\ndelete table inet ${name}\n`);
}

/** Why nftables cannot be used here, or undefined when `nft` runs. */
export async function nftablesProblem(): Promise<string | undefined> {
  const r = await execa('nft', ['--version'], {
    reject: false,
    extendEnv: false,
    env: SYSTEM_PATH_ENV,
    timeout: 10_000,
  });
  if ((r as { code?: string }).code === 'ENOENT') return `nft not found: ${INSTALL_HINT}`;
  return r.exitCode === 0 ? undefined : String(r.stderr).trim() || `nft --version: exit ${r.exitCode}`;
}
