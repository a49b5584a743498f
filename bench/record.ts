// A full run records itself: bench/last-run/<section>.md (the table with each row's target and
// whether this run met it, and the notes) and .json (the rows), with when, at which commit and on
// what machine. These files are the one place docs take figures from; nobody edits them by hand.
// Reduced runs (--quick, --smoke) record nothing: their sizes are not the targets' sizes.
import { execFileSync } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { markdownTable, notesOf, type Row } from './rows.ts';
import { TARGETS } from './targets.ts';

const root = new URL('..', import.meta.url).pathname;
export const LAST_RUN_DIR = join(root, 'bench', 'last-run');

export type Section = 'main' | 'wan' | 'pod-network' | 'hosted' | 'front-door' | 'operator';

function git(args: string[]): string {
  try {
    return execFileSync('git', args, { cwd: root, encoding: 'utf8' }).trim();
  } catch {
    return '';
  }
}

/** Where and what ran: the header of the recorded run. */
function provenance(seconds: number): { when: string; commit: string; machine: string; seconds: number } {
  const commit = git(['rev-parse', '--short', 'HEAD']) || 'unknown';
  const dirty = git(['status', '--porcelain', '--untracked-files=no']) ? ' with uncommitted changes' : '';
  const cpu = cpus();
  return {
    when: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    commit: `${commit}${dirty}`,
    machine: `${cpu.length} x ${cpu[0]?.model.trim() ?? 'unknown CPU'}, ${Math.round(totalmem() / 2 ** 30)} GiB`,
    seconds,
  };
}

/** Writes bench/last-run/<section>.md and .json; returns the Markdown file's path. */
export async function recordRun(section: Section, rows: Row[], seconds: number, dir = LAST_RUN_DIR): Promise<string> {
  const p = provenance(seconds);
  const targeted = rows.map((r) => {
    const t = TARGETS[r.scenario];
    const met = t?.met(r);
    return { target: t?.text ?? '', met: met === undefined || met === null ? '' : met ? 'yes' : 'no' };
  });
  const table = markdownTable(rows, {
    target: targeted.map((x) => x.target),
    met: targeted.map((x) => x.met),
  });
  const notes = notesOf(rows);
  const md = [
    `<!-- written by \`npm run bench\` (bench/record.ts) after a full run; the next full run of this section replaces it -->`,
    `# The last full bench run: ${section === 'main' ? 'every section but the separate ones' : `the ${section} section`}`,
    '',
    `- when: ${p.when}, ${p.seconds} s`,
    `- commit: ${p.commit}`,
    `- machine: ${p.machine}`,
    '',
    table,
    ...(notes.length ? ['', ...notes] : []),
    '',
  ].join('\n');
  await mkdir(dir, { recursive: true });
  const file = join(dir, `${section}.md`);
  await writeFile(file, md);
  await writeFile(join(dir, `${section}.json`), `${JSON.stringify({ ...p, section, runs: rows }, null, 2)}\n`);
  return file;
}
