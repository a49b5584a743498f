// Does a component binary report the version it is pinned at?
import { execa } from 'execa';
import type { ComponentPin } from './manifest.ts';

export async function checkVersion(c: ComponentPin, path: string): Promise<void> {
  if (!c.versionCheck) return;
  const r = await execa(path, c.versionCheck.args, {
    reject: false,
    all: true,
    timeout: 20_000,
    env: {},
    extendEnv: false,
  });
  const out = r.all ?? '';
  if (!out.includes(c.versionCheck.expect)) {
    throw new Error(
      `${c.name} reports the wrong version: expected "${c.versionCheck.expect}", got "${out.split('\n')[0]}"`,
    );
  }
}
