// A data dir records the format kctl wrote it in: a start brings an older one forward step by
// step, and refuses one a newer kctl wrote before touching anything in it.
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { test, type TestContext } from 'node:test';
import { UserError } from '../../../src/base/errors.ts';
import { createLogger } from '../../../src/base/log.ts';
import {
  DATA_FORMAT_FILE,
  DATA_FORMAT_STEPS,
  migrateDataDir,
  readDataFormat,
  refuseNewerDataDir,
  type DataFormatStep,
} from '../../../src/host/data-format.ts';

async function dataDir(t: TestContext): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'kctl-data-format-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

function capture() {
  const lines: { msg: string }[] = [];
  const destination = new Writable({
    write: (c: Buffer, _e, cb) => (lines.push(JSON.parse(c.toString()) as { msg: string }), cb()),
  });
  return { log: createLogger({ destination, pretty: false }), lines };
}

const NEWEST = DATA_FORMAT_STEPS.at(-1)!.to;

test('a new data dir is recorded at the newest format, with the version that wrote it, and nothing is logged', async (t) => {
  const dir = await dataDir(t);
  const { log, lines } = capture();
  assert.deepEqual(await migrateDataDir(dir, '0.2.0', log), { format: NEWEST, writtenBy: '0.2.0' });
  assert.deepEqual(JSON.parse(await readFile(join(dir, DATA_FORMAT_FILE), 'utf8')), {
    format: NEWEST,
    writtenBy: '0.2.0',
  });
  assert.equal(lines.length, 0);
});

test('a data dir at an older format is brought forward step by step, and each step is logged', async (t) => {
  const dir = await dataDir(t);
  await writeFile(join(dir, 'cluster-config.yaml'), 'spec: {}\n');
  const { log, lines } = capture();
  const steps: DataFormatStep[] = [
    { to: 1, what: 'record the format', run: async () => undefined },
    {
      to: 2,
      what: 'rename the config',
      run: async (d) => writeFile(join(d, 'config-v2.yaml'), await readFile(join(d, 'cluster-config.yaml'))),
    },
  ];
  await writeFile(join(dir, DATA_FORMAT_FILE), JSON.stringify({ format: 1, writtenBy: '0.1.0' }));
  assert.deepEqual(await migrateDataDir(dir, '0.2.0', log, steps), { format: 2, writtenBy: '0.2.0' });
  assert.equal(await readFile(join(dir, 'config-v2.yaml'), 'utf8'), 'spec: {}\n');
  assert.deepEqual(
    lines.map((l) => l.msg),
    ['data dir: rename the config (format 1 -> 2)'],
  );
  // Run again: nothing left to do.
  const again = capture();
  await migrateDataDir(dir, '0.2.0', again.log, steps);
  assert.equal(again.lines.length, 0);
});

test('a step that fails leaves the record at the last finished step, and the next start runs it again', async (t) => {
  const dir = await dataDir(t);
  let runs = 0;
  const steps: DataFormatStep[] = [
    { to: 1, what: 'one', run: async () => undefined },
    {
      to: 2,
      what: 'two',
      run: async () => {
        runs++;
        if (runs === 1) throw new Error('disk full');
      },
    },
  ];
  await assert.rejects(migrateDataDir(dir, '0.2.0', capture().log, steps), /disk full/);
  assert.equal((await readDataFormat(dir))?.format, 1);
  await migrateDataDir(dir, '0.2.0', capture().log, steps);
  assert.equal((await readDataFormat(dir))?.format, 2);
  assert.equal(runs, 2);
});

test('a data dir written by a newer format is refused with one line, and nothing in it changes', async (t) => {
  const dir = await dataDir(t);
  const record = JSON.stringify({ format: NEWEST + 1, writtenBy: '9.0.0' });
  await writeFile(join(dir, DATA_FORMAT_FILE), record);
  // Each started only when awaited: a second one started at once could reject while the first is
  // awaited, with no handler yet (an unhandled rejection fails the test now and then).
  for (const attempt of [() => refuseNewerDataDir(dir, '0.1.0'), () => migrateDataDir(dir, '0.1.0', capture().log)])
    await assert.rejects(attempt(), (err: Error) => {
      assert.ok(err instanceof UserError);
      assert.match(
        err.message,
        /was written by kctl 9\.0\.0 \(data format \d+\); this kctl 0\.1\.0 reads up to format \d+: run the newer kctl/,
      );
      assert.ok(!err.message.includes('\n'));
      return true;
    });
  assert.equal(await readFile(join(dir, DATA_FORMAT_FILE), 'utf8'), record);
  assert.deepEqual(await readdir(dir), [DATA_FORMAT_FILE]);
});

test('a damaged record is refused with what to do', async (t) => {
  const dir = await dataDir(t);
  await writeFile(join(dir, DATA_FORMAT_FILE), '{"format": "x"');
  await assert.rejects(
    migrateDataDir(dir, '0.1.0', capture().log),
    /kctl-data\.json is damaged \(no integer "format"\); restore it from a backup/,
  );
});

test('a rollback to the previous kctl at the same format rewrites who wrote it', async (t) => {
  const dir = await dataDir(t);
  await migrateDataDir(dir, '0.2.0', capture().log);
  await migrateDataDir(dir, '0.1.0', capture().log);
  assert.deepEqual(await readDataFormat(dir), { format: NEWEST, writtenBy: '0.1.0' });
});
