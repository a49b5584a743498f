// A secret given on the command line (kctl worker --token) is readable by every user of the host
// (ps, /proc/<pid>/cmdline) for as long as the process runs. On Linux, Node's process.title
// setter rewrites the memory the kernel reads the command line from (up to its original length),
// so kctl overwrites the secret there as soon as it has read it. Whatever started kctl (sudo, a
// tsx wrapper) keeps its own copy: --token-file leaves none anywhere.
import { readFileSync, writeFileSync } from 'node:fs';

export const HIDDEN = '***';

/** Replaces `secret` in this process's command line with HIDDEN; returns whether it was there. */
export function hideFromCommandLine(secret: string): boolean {
  if (secret === '') return false;
  let args: string[];
  let comm: string;
  try {
    args = readFileSync('/proc/self/cmdline', 'utf8').split('\0');
    comm = readFileSync('/proc/self/comm', 'utf8').trim();
  } catch {
    return false; // not Linux: nothing to rewrite
  }
  if (!args.some((a) => a.includes(secret))) return false;
  if (args.at(-1) === '') args.pop(); // the NUL that ends the last argument
  // One string where the arguments were: ps shows it as before, with the secret replaced.
  process.title = args.map((a) => a.replaceAll(secret, HIDDEN)).join(' ');
  // libuv also renames the thread to the title's first 15 bytes; keep the name ps -o comm and pgrep know.
  try {
    writeFileSync('/proc/self/comm', comm);
  } catch {
    /* the title is what matters */
  }
  return true;
}
