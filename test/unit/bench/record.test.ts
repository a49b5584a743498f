import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { recordRun } from '../../../bench/record.ts';
import type { Row } from '../../../bench/rows.ts';
import { tempDir } from '../../helpers.ts';

const row = (scenario: string, kctl: number | null, upstream: number | null, direct: number | null = null): Row => ({
  scenario,
  unit: 'x',
  kctl,
  upstream,
  direct,
});

test('a full run records its rows with each target and whether this run met it, when, at which commit and where', async (t) => {
  const dir = await tempDir(t, 'kctl-bench-record-');
  const rows = [
    row('throughput-1', 300, 100, 1000),
    row('throughput-16', 200, 100),
    row('dial-latency-p50', 1, 4),
    row('worker-rss-mb', 82.6, null),
    row('leak-residual', null, 3),
    row('coredns-ready-s', 14.5, null),
  ];
  const file = await recordRun('main', rows, 512, dir);
  const md = await readFile(file, 'utf8');
  const line = (scenario: string) => md.split('\n').find((l) => l.startsWith(`| ${scenario} |`)) ?? '';
  assert.match(
    line('throughput-1'),
    /\| 3\.00x \| 0\.30x \| kctl\/upstream >= 2\.5x and kctl\/direct >= 0\.25x \| yes \|$/,
  );
  assert.match(line('throughput-16'), /\| kctl\/upstream >= 2\.5x \| no \|$/);
  assert.match(line('dial-latency-p50'), /\| kctl\/upstream <= 0\.5x \| yes \|$/);
  assert.match(line('worker-rss-mb'), /\| <= 60 \| no \|$/);
  assert.match(line('leak-residual'), /\| <= 0 \| {2}\|$/, 'a row with no figure is not judged');
  assert.match(line('coredns-ready-s'), /\| {2}\| {2}\|$/, 'a row with no target');
  assert.match(md, /^- when: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ, 512 s$/m);
  assert.match(md, /^- commit: [0-9a-f]{7,}( with uncommitted changes)?$/m);
  assert.match(md, /^- machine: \d+ x .+, \d+ GiB$/m);
  const json = JSON.parse(await readFile(join(dir, 'main.json'), 'utf8')) as { section: string; runs: Row[] };
  assert.equal(json.section, 'main');
  assert.deepEqual(json.runs, rows);
});
