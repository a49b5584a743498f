// kine gets its data source through KINE_ENDPOINT, never its command line, and no log line
// carries the database password.
import assert from 'node:assert/strict';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { dataSourceSecrets, datastoreIdentity, KineComponent } from '../../../src/etcd/kine.ts';
import { captureLogger, tempDir } from '../../helpers.ts';
import { waitFor } from '../../wait.ts';

test('the password of a data source, as written and decoded, and a password option', () => {
  assert.deepEqual(dataSourceSecrets('postgres://kine:p%40ss@db:5432/kine?sslmode=disable'), ['p%40ss', 'p@ss']);
  assert.deepEqual(dataSourceSecrets('postgres://kine@db:5432/kine?password=opt'), ['opt']);
  assert.deepEqual(dataSourceSecrets('mysql://root:pw@tcp(db:3306)/kine'), ['pw']);
  assert.deepEqual(dataSourceSecrets('postgres://db:5432/kine'), []);
  assert.deepEqual(dataSourceSecrets('sqlite:///var/lib/kctl/db/state.db'), []);
  assert.deepEqual(dataSourceSecrets(undefined), []);
  assert.equal(datastoreIdentity('postgres://kine:p%40ss@db:5432/kine'), 'postgres://db:5432/kine');
});

test('kine reads the data source from its environment; its command line and its logged output hold no password', async (t) => {
  const dir = await tempDir(t);
  const binDir = join(dir, 'bin');
  await mkdir(binDir);
  // A stand-in kine that says what it got, as a kine that fails to connect would.
  await writeFile(
    join(binDir, 'kine'),
    '#!/bin/sh\necho "args: $*"\necho "endpoint: $KINE_ENDPOINT"\necho "cmdline: $(tr \'\\0\' \' \' </proc/$$/cmdline)"\nexec sleep 1000\n',
  );
  await chmod(join(binDir, 'kine'), 0o755);
  const { log, raw, lines } = captureLogger();
  const kine = new KineComponent({
    binDir,
    runDir: join(dir, 'run'),
    dbDir: join(dir, 'db'),
    socket: join(dir, 'run', 'kine.sock'),
    dataSource: 'postgres://kine:s3cr%21t@db:5432/kine',
  });
  t.after(() => kine.stop());
  await kine.init({ log, statuses: () => [] });
  await kine.start();
  const said = (prefix: string) => waitFor(prefix, 5_000, () => lines().find((l) => String(l.msg).startsWith(prefix)));
  assert.equal(
    (await said('endpoint:')).msg,
    'endpoint: postgres://kine:***@db:5432/kine',
    'KINE_ENDPOINT holds the data source',
  );
  assert.equal(
    (await said('args:')).msg,
    `args: --listen-address=unix://${join(dir, 'run', 'kine.sock')} --metrics-bind-address=0 --log-format=json --compact-min-retain=0`,
  );
  assert.doesNotMatch(String((await said('cmdline:')).msg), /db:5432/);
  assert.ok(!raw().includes('s3cr'), raw());
});

test('a connection pool bound reaches kine as its flags; no idle connections is -1 to kine (its 0 means its default of 20)', async (t) => {
  const dir = await tempDir(t);
  const binDir = join(dir, 'bin');
  await mkdir(binDir);
  await writeFile(join(binDir, 'kine'), '#!/bin/sh\necho "args: $*"\nexec sleep 1000\n');
  await chmod(join(binDir, 'kine'), 0o755);
  const { log, lines } = captureLogger();
  const kine = new KineComponent({
    binDir,
    runDir: join(dir, 'run'),
    dbDir: join(dir, 'db'),
    socket: join(dir, 'run', 'kine.sock'),
    dataSource: 'postgres://kine@db:5432/kine',
    pool: { maxOpen: 15, maxIdle: 0 },
  });
  t.after(() => kine.stop());
  await kine.init({ log, statuses: () => [] });
  await kine.start();
  const args = await waitFor('args', 5_000, () => lines().find((l) => String(l.msg).startsWith('args:')));
  assert.match(String(args.msg), / --datastore-max-open-connections=15 --datastore-max-idle-connections=-1$/);
});
