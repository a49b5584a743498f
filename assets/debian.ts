// Debian packages the build and the test lab need; installed once, only when missing.
import { execa } from 'execa';

async function installed(pkg: string): Promise<boolean> {
  const r = await execa('dpkg-query', ['-W', '-f=${Status}', pkg], { reject: false });
  return r.stdout.includes('install ok installed');
}

export async function ensureDebianPackages(pkgs: string[]): Promise<void> {
  const missing: string[] = [];
  for (const p of pkgs) if (!(await installed(p))) missing.push(p);
  if (missing.length === 0) return;
  // Progress goes to stderr, apt-get's too: a command that prints JSON (bench --json) keeps stdout clean.
  process.stderr.write(`installing Debian packages: ${missing.join(' ')}\n`);
  const env = { DEBIAN_FRONTEND: 'noninteractive' };
  await execa('apt-get', ['update', '-qq'], { env, stdin: 'ignore', stdout: 2, stderr: 'inherit' });
  await execa('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...missing], {
    env,
    stdin: 'ignore',
    stdout: 2,
    stderr: 'inherit',
  });
}
