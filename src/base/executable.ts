// Which file is kctl. dist/kctl starts as a small launcher that unpacks the Node runtime (with
// kctl's code) once and execs it (layout in src/payload/payload.ts), so process.execPath is the
// unpacked runtime; the launcher names the file the user ran in KCTL_EXECUTABLE. That file carries
// the component payload, and it is what a systemd unit must start.
import { isSea } from 'node:sea';

export const EXECUTABLE_ENV = 'KCTL_EXECUTABLE';

/** The kctl executable this process was started from; undefined for a checkout run (node and a script) or a runtime started by hand. */
export function kctlExecutable(): string | undefined {
  if (!isSea()) return undefined;
  return process.env[EXECUTABLE_ENV] || undefined;
}
