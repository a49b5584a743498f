// kctl-size-mb and first-start-staging-s: what an edge user downloads, and what the first start
// pays to take the component binaries out of it. Staging is timed as `kctl controller
// --init-only` on a fresh data dir and a fresh runtime directory (the launcher unpacks the Node
// runtime; then decompress and sha256-check the controller binaries, make the PKI and config
// files, exit), the median of `reps` runs; the page cache holds the executable after the first
// read, as it does on a host that just downloaded it.
import { stat } from 'node:fs/promises';
import { mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { requireKctl } from '../test/e2e/lab/kctl.ts';

export interface ExecutableFigures {
  sizeMiB: number;
  stagingSeconds: number[];
}

export async function executableFigures(dir: string, log: (m: string) => void, reps = 3): Promise<ExecutableFigures> {
  const kctl = requireKctl();
  const sizeMiB = (await stat(kctl)).size / 1024 / 1024;
  const stagingSeconds: number[] = [];
  for (let i = 0; i < reps; i++) {
    const d = await mkdtemp(join(dir, 'stage-'));
    const t0 = Date.now();
    const r = await execa(
      kctl,
      ['controller', '--init-only', '--data-dir', join(d, 'data'), '--run-dir', join(d, 'run')],
      {
        reject: false,
        all: true,
        env: { KCTL_RUNTIME_DIR: join(d, 'runtime') },
      },
    );
    const s = (Date.now() - t0) / 1000;
    if (r.exitCode !== 0)
      throw new Error(`kctl controller --init-only failed (${r.exitCode}):\n${String(r.all).slice(-2000)}`);
    stagingSeconds.push(s);
    log(`first-start staging ${i + 1}/${reps}: ${s.toFixed(2)} s`);
    await rm(d, { recursive: true, force: true });
  }
  return { sizeMiB, stagingSeconds };
}
