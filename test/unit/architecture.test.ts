// The layering of src/, as a test: arrows point down only. A module imports from its own
// folder and from rows below it, never from a sibling in its row or a row above.
//
//   cli/                                          commands, commander, exit codes, output formats
//   operator/                                     control planes as pods on a management cluster: stands on the controller role
//   controller/  worker/  dropin/                 roles: ordered lists of components (dropin: the standalone agent and server)
//   etcd/ konnectivity/ frontdoor/ payload/ pki/ kube/ join/ host/  building blocks, each usable on its own
//   supervisor/                                   child processes
//   base/                                         errors, addresses, flags, durations, logs, probes,
//                                                 components and their manager, signals, status socket
//
// Inside konnectivity/ the rooms follow the same rule (ROOM below):
//
//   index.ts client.ts                            the folder's entry; a ProxyService client
//   server/  agent/  dropin/                      the two ends, side by side; the drop-in ports
//   wire/                                         the protocol both ends speak
//
// Inside controller/ the rooms go by job (CONTROLLER_ROOM below; src/controller/README.md):
//
//   index.ts                                      the controller's list of components
//   cluster/  leases/                             what it publishes in the cluster; leases and status
//   components/                                   the programs it runs: storage, API, scheduler, ...
//   join/                                         tokens, the join endpoint, node certificates
//   encryption/ backups/ pki/ upgrades/ tenants/ nodes/   day-2 jobs and the node directory
//   config/                                       the config, its paths and URLs
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = resolve(import.meta.dirname, '../..');
const src = join(root, 'src');

const ROW: Record<string, number> = {
  base: 0,
  supervisor: 1,
  etcd: 2,
  konnectivity: 2,
  frontdoor: 2,
  payload: 2,
  pki: 2,
  kube: 2,
  join: 2,
  host: 2,
  controller: 3,
  worker: 3,
  dropin: 3,
  operator: 4,
  cli: 5,
};
/** Folders that may import from fewer rows than their own row allows. */
const ONLY: Record<string, readonly string[]> = {
  // The tunnel is used by the controller, the worker and the standalone commands alike.
  konnectivity: ['base'],
  // The front door routes bytes by name; what the names are is its caller's.
  frontdoor: ['base'],
};

/** Rooms of src/konnectivity/ ('' for its top files): server and agent share only wire. */
const KONNECTIVITY = join(src, 'konnectivity');
const ROOM: Record<string, number> = {
  wire: 0,
  server: 1,
  agent: 1,
  dropin: 1,
  '': 2,
};

/** Rooms of src/controller/ ('' for index.ts): imports point down, never to a sibling room. */
const CONTROLLER = join(src, 'controller');
const CONTROLLER_ROOM: Record<string, number> = {
  config: 0,
  encryption: 1,
  backups: 1,
  pki: 1,
  upgrades: 1,
  tenants: 1,
  nodes: 1,
  join: 2,
  components: 3,
  cluster: 4,
  leases: 4,
  '': 5,
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

/** The first folder under `base` a path belongs to ('' for files directly in it). */
function folderUnder(base: string, path: string): string {
  const rel = relative(base, path);
  return rel.includes('/') ? (rel.split('/')[0] ?? '') : '';
}

/** The top folder under src/ a path belongs to ('' for files directly in src/). */
function folderOf(path: string): string {
  return folderUnder(src, path);
}

/**
 * Relative imports that break a layer table among the folders under `base`: one that points to
 * a sibling in its row or a row above. Imports leaving `base` are the caller's to judge.
 */
function wrongImports(
  list: Import[],
  base: string,
  rows: Record<string, number>,
  only: Record<string, readonly string[]> = {},
): string[] {
  const wrong: string[] = [];
  for (const imp of list) {
    if (!imp.spec.startsWith('.') || !imp.from.startsWith(base + '/')) continue;
    const target = resolve(dirname(imp.from), imp.spec);
    if (!target.startsWith(base + '/')) continue;
    const from = folderUnder(base, imp.from);
    const to = folderUnder(base, target);
    if (from === to) continue;
    const allowed = only[from] ? only[from].includes(to) : (rows[to] ?? Infinity) < (rows[from] ?? -Infinity);
    if (!allowed)
      wrong.push(
        `${relative(root, imp.from)}:${imp.line} imports ${relative(root, target)} (${from || '.'} -> ${to || '.'})`,
      );
  }
  return wrong;
}

const files = sourceFiles(src);
const imports = files.flatMap(importsOf);

test('every source file lives in a folder with a known row', () => {
  const unknown = files.map((f) => relative(root, f)).filter((f) => !(folderOf(join(root, f)) in ROW));
  assert.deepEqual(unknown, [], `add these folders to the layer table or move the files: ${unknown.join(', ')}`);
});

test('imports point down only: own folder or a lower row', () => {
  assert.deepEqual(wrongImports(imports, src, ROW, ONLY), []);
});

test('every konnectivity file lives in a known room', () => {
  const unknown = files
    .filter((f) => f.startsWith(KONNECTIVITY + '/') && !(folderUnder(KONNECTIVITY, f) in ROOM))
    .map((f) => relative(root, f));
  assert.deepEqual(unknown, [], `add these rooms to the ROOM table or move the files: ${unknown.join(', ')}`);
});

test('inside konnectivity, imports point down only: server and agent share wire, never each other', () => {
  assert.deepEqual(wrongImports(imports, KONNECTIVITY, ROOM), []);
});

test('every controller file lives in a known room', () => {
  const unknown = files
    .filter((f) => f.startsWith(CONTROLLER + '/') && !(folderUnder(CONTROLLER, f) in CONTROLLER_ROOM))
    .map((f) => relative(root, f));
  assert.deepEqual(
    unknown,
    [],
    `add these rooms to the CONTROLLER_ROOM table or move the files: ${unknown.join(', ')}`,
  );
});

test('inside controller, imports point down only: a job uses the config and the jobs below it, never a sibling', () => {
  assert.deepEqual(wrongImports(imports, CONTROLLER, CONTROLLER_ROOM), []);
});

test('the rest of src/ enters konnectivity/ only through its index.ts', () => {
  const around = imports
    .filter((i) => i.spec.startsWith('.') && !i.from.startsWith(KONNECTIVITY + '/'))
    .filter((i) => {
      const target = resolve(dirname(i.from), i.spec);
      return target.startsWith(KONNECTIVITY + '/') && target !== join(KONNECTIVITY, 'index.ts');
    })
    .map((i) => `${relative(root, i.from)}:${i.line} ${i.spec}`);
  assert.deepEqual(around, [], 'export what is needed from src/konnectivity/index.ts and import it from there');
});

test('nothing in src/ points outside it', () => {
  const outside = imports
    .filter((i) => i.spec.startsWith('.') && !resolve(dirname(i.from), i.spec).startsWith(src + '/'))
    .filter((i) => !/\/package\.json$/.test(i.spec))
    .map((i) => `${relative(root, i.from)}:${i.line} ${i.spec}`);
  assert.deepEqual(outside, []);
});

test("no 'as Error' cast, in the tests and the bench either: an error kctl did not make is read with base/errors.ts (messageOf, asError, errnoOf)", () => {
  const self = fileURLToPath(import.meta.url);
  const everywhere = [...files, ...sourceFiles(join(root, 'test')), ...sourceFiles(join(root, 'bench'))];
  const casts = everywhere
    .filter((f) => f !== self && /\bas Error\b/.test(readFileSync(f, 'utf8')))
    .map((f) => relative(root, f));
  assert.deepEqual(casts, []);
});

test('only cli/ knows commander', () => {
  const users = imports
    .filter((i) => i.spec === 'commander' && folderOf(i.from) !== 'cli')
    .map((i) => relative(root, i.from));
  assert.deepEqual(users, []);
});

test('no source file is over 400 lines (generated code aside): a longer one mixes jobs that want their own files', () => {
  // sourceFiles skips gen/: konnectivity/wire/gen/konnectivity.ts is written by `npm run gen`.
  const long = files
    .map((f) => [relative(root, f), readFileSync(f, 'utf8').split('\n').length] as const)
    .filter(([, n]) => n > 400);
  assert.deepEqual(
    long.map(([f, n]) => `${f}: ${n} lines`),
    [],
  );
});

test('the check sees imports (it would catch a wrong one)', () => {
  // Guards the regex above: if it stopped matching, every other test here would pass vacuously.
  assert.ok(imports.length > 200, `only ${imports.length} imports found`);
  assert.ok(imports.some((i) => i.from.endsWith('/controller/index.ts') && i.spec === '../base/manager.ts'));
  assert.ok(imports.some((i) => i.from.startsWith(join(CONTROLLER, 'join') + '/') && i.spec.startsWith('../config/')));
  assert.ok(imports.some((i) => i.spec === 'commander'));
  assert.ok(imports.some((i) => i.from.startsWith(join(KONNECTIVITY, 'agent') + '/') && i.spec.startsWith('../wire/')));
});

test('the checks find a wrong import (a sibling, a row above, an upward room)', () => {
  const at = (from: string, spec: string): Import => ({ from: join(src, from), spec, line: 1 });
  const wrong = [
    at('worker/join.ts', '../controller/paths.ts'),
    at('base/log.ts', '../cli/support/output.ts'),
    at('konnectivity/agent/agent.ts', '../server/broker.ts'),
    at('konnectivity/wire/link.ts', '../agent/connection.ts'),
    at('konnectivity/server/broker.ts', '../client.ts'),
  ];
  assert.equal(wrongImports(wrong.slice(0, 2), src, ROW, ONLY).length, 2);
  assert.deepEqual(
    wrongImports(wrong.slice(2), KONNECTIVITY, ROOM).map((w) => w.replace(/:1 .*\(/, ' (')),
    [
      'src/konnectivity/agent/agent.ts (agent -> server)',
      'src/konnectivity/wire/link.ts (wire -> agent)',
      'src/konnectivity/server/broker.ts (server -> .)',
    ],
  );
  // and lets through what the tables allow
  const right = [
    at('konnectivity/agent/agent.ts', '../wire/flow.ts'),
    at('konnectivity/index.ts', './server/server.ts'),
  ];
  assert.deepEqual(wrongImports(right, KONNECTIVITY, ROOM), []);
  assert.deepEqual(
    wrongImports(
      [
        at('controller/pki/pki-renewer.ts', '../backups/backup.ts'),
        at('controller/config/config.ts', '../join/tokens.ts'),
      ],
      CONTROLLER,
      CONTROLLER_ROOM,
    ).length,
    2,
  );
  assert.deepEqual(
    wrongImports(
      [at('controller/join/tokens.ts', '../config/urls.ts'), at('controller/index.ts', './leases/lease.ts')],
      CONTROLLER,
      CONTROLLER_ROOM,
    ),
    [],
  );
});
