// The layering of src/, as a test: arrows point down only. A module imports from its own
// folder and from rows below it, never from a sibling in its row or a row above.
//
//   cli/                                          commands, commander, exit codes, output formats
//   controller/  worker/                          roles: ordered lists of components
//   etcd/ konnectivity/ payload/ pki/ kube/ join/ host/  building blocks, each usable on its own
//   supervisor/                                   child processes
//   base/                                         errors, addresses, flags, durations, logs, probes,
//                                                 components and their manager, signals, status socket
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';

const root = resolve(import.meta.dirname, '../..');
const src = join(root, 'src');

const ROW: Record<string, number> = {
  base: 0,
  supervisor: 1,
  etcd: 2,
  konnectivity: 2,
  payload: 2,
  pki: 2,
  kube: 2,
  join: 2,
  host: 2,
  controller: 3,
  worker: 3,
  cli: 4,
};
/** Folders that may import from fewer rows than their own row allows. */
const ONLY: Record<string, readonly string[]> = {
  // The tunnel is used by the controller, the worker and the standalone commands alike.
  konnectivity: ['base'],
};

interface Import {
  from: string;
  spec: string;
  line: number;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return name === 'gen' ? [] : sourceFiles(p);
    return p.endsWith('.ts') ? [p] : [];
  });
}

function importsOf(file: string): Import[] {
  const text = readFileSync(file, 'utf8');
  const out: Import[] = [];
  const re =
    /(?:^|\n)\s*(?:import|export)\b[^'"]*?\bfrom\s*['"]([^'"]+)['"]|\bimport\s*\(\s*['"]([^'"]+)['"]\s*\)|(?:^|\n)\s*import\s+['"]([^'"]+)['"]/g;
  for (const m of text.matchAll(re)) {
    const spec = m[1] ?? m[2] ?? m[3] ?? '';
    out.push({ from: file, spec, line: text.slice(0, m.index).split('\n').length + (m[0].startsWith('\n') ? 1 : 0) });
  }
  return out;
}

/** The top folder under src/ a path belongs to ('' for files directly in src/). */
function folderOf(path: string): string {
  const rel = relative(src, path);
  return rel.includes('/') ? (rel.split('/')[0] ?? '') : '';
}

const files = sourceFiles(src);
const imports = files.flatMap(importsOf);

test('every source file lives in a folder with a known row', () => {
  const unknown = files.map((f) => relative(root, f)).filter((f) => !(folderOf(join(root, f)) in ROW));
  assert.deepEqual(unknown, [], `add these folders to the layer table or move the files: ${unknown.join(', ')}`);
});

test('imports point down only: own folder or a lower row', () => {
  const wrong: string[] = [];
  for (const imp of imports) {
    if (!imp.spec.startsWith('.')) continue;
    const target = resolve(dirname(imp.from), imp.spec);
    const from = folderOf(imp.from);
    const to = folderOf(target);
    if (from === to) continue;
    const allowed = ONLY[from] ? ONLY[from].includes(to) : (ROW[to] ?? Infinity) < (ROW[from] ?? -Infinity);
    if (!allowed) wrong.push(`${relative(root, imp.from)}:${imp.line} imports ${relative(root, target)} (${from} -> ${to})`);
  }
  assert.deepEqual(wrong, []);
});

test('nothing in src/ points outside it', () => {
  const outside = imports
    .filter((i) => i.spec.startsWith('.') && !resolve(dirname(i.from), i.spec).startsWith(src + '/'))
    .filter((i) => !/\/package\.json$/.test(i.spec))
    .map((i) => `${relative(root, i.from)}:${i.line} ${i.spec}`);
  assert.deepEqual(outside, []);
});

test('only cli/ knows commander', () => {
  const users = imports.filter((i) => i.spec === 'commander' && folderOf(i.from) !== 'cli').map((i) => relative(root, i.from));
  assert.deepEqual(users, []);
});

test('no source file is over 500 lines: a longer one mixes jobs that want their own files', () => {
  const long = files.map((f) => [relative(root, f), readFileSync(f, 'utf8').split('\n').length] as const).filter(([, n]) => n > 500);
  assert.deepEqual(
    long.map(([f, n]) => `${f}: ${n} lines`),
    [],
  );
});

test('the check sees imports (it would catch a wrong one)', () => {
  // Guards the regex above: if it stopped matching, every other test here would pass vacuously.
  assert.ok(imports.length > 200, `only ${imports.length} imports found`);
  assert.ok(imports.some((i) => i.from.endsWith('/controller/index.ts') && i.spec === '../base/manager.ts'));
  assert.ok(imports.some((i) => i.spec === 'commander'));
});
