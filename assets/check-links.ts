// The docs link checker (`npm run lint`): every relative link in the project's Markdown points at
// a file that exists, and a link with #anchor at a heading of that file; every page under docs/ is
// linked from README.md. One line per broken link; exits 1 when there is any.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const root = new URL('..', import.meta.url).pathname;

/** Markdown files of the project (not its dependencies or build output). */
function markdownFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (['node_modules', 'dist', '.git', '.scratch'].includes(name)) return [];
    if (statSync(p).isDirectory()) return markdownFiles(p);
    return name.endsWith('.md') ? [p] : [];
  });
}

/** A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens. */
export function anchorOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');
}

/** The anchors a Markdown text's headings give (outside code blocks); repeated headings get -1, -2. */
export function anchorsOf(text: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  let code = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('```')) code = !code;
    const m = !code && /^#{1,6} (.+)$/.exec(line);
    if (!m) continue;
    const base = anchorOf(m[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** The relative links of a Markdown text (outside code blocks and inline code): [text](target). */
export function linksOf(text: string): string[] {
  const out: string[] = [];
  let code = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('```')) code = !code;
    if (code) continue;
    for (const m of line.replace(/`[^`]*`/g, '').matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1]!;
      if (!/^[a-z]+:/i.test(target)) out.push(target);
    }
  }
  return out;
}

function check(): string[] {
  const problems: string[] = [];
  for (const file of markdownFiles(root)) {
    const text = readFileSync(file, 'utf8');
    const where = relative(root, file);
    for (const link of linksOf(text)) {
      const [path, anchor] = link.split('#') as [string, string | undefined];
      const target = path ? resolve(dirname(file), path) : file;
      if (!existsSync(target)) {
        problems.push(`${where}: link to ${link}: no such file; fix the path or the link`);
        continue;
      }
      if (anchor && target.endsWith('.md') && !anchorsOf(readFileSync(target, 'utf8')).has(anchor))
        problems.push(`${where}: link to ${link}: ${relative(root, target)} has no heading #${anchor}`);
    }
  }
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  for (const page of readdirSync(join(root, 'docs')).filter((n) => n.endsWith('.md')))
    if (!linksOf(readme).includes(`docs/${page}`))
      problems.push(`docs/${page}: not linked from README.md; add it to the documentation table`);
  return problems;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const problems = check();
  for (const p of problems) process.stderr.write(`${p}\n`);
  process.exit(problems.length ? 1 : 0);
}
