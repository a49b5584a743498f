import assert from 'node:assert/strict';
import { test } from 'node:test';
import { COMMANDS, buildProgram, commandOf } from '../../../src/cli/program.ts';
import { DEFAULT_HOST_STATE_DIR, hostStateDir, useHostStateDir } from '../../../src/host/port-claims.ts';

const names = (p: { commands: readonly { name(): string }[] }): string[] => p.commands.map((c) => c.name());

test('with no command named, the tree has every command in the table, in its order, and no other', async () => {
  assert.deepEqual(
    names(await buildProgram([])),
    COMMANDS.flatMap((c) => c.names),
  );
  assert.deepEqual(
    names(await buildProgram(['--help'])),
    COMMANDS.flatMap((c) => c.names),
  );
  assert.deepEqual(
    names(await buildProgram(['wroker'])),
    COMMANDS.flatMap((c) => c.names),
    'a typo gets every command to suggest from',
  );
});

test("a command loads only its own module's commands", async () => {
  for (const c of COMMANDS) for (const n of c.names) assert.deepEqual(names(await buildProgram([n])), c.names, n);
});

test('the command is the first word that is neither a global option nor its value', () => {
  assert.equal(commandOf(['--data-dir', '/d', '--run-dir', '/r', 'worker', '--token', 't']), 'worker');
  assert.equal(commandOf(['--name', 'team-a', 'status', '-o', 'json']), 'status');
  assert.equal(commandOf(['--data-dir=/d', '--debug', 'token', 'create']), 'token');
  assert.equal(commandOf(['--help']), undefined);
  assert.equal(commandOf([]), undefined);
});

test('--host-state-dir moves where tenants claim ports, for the command it is given to; nothing else does', async () => {
  assert.equal(commandOf(['--host-state-dir', '/h', 'tenant', 'list']), 'tenant');
  const before = hostStateDir();
  assert.equal(before, DEFAULT_HOST_STATE_DIR);
  const run = async (argv: string[]) => {
    const p = await buildProgram(argv);
    p.commands.find((c) => c.name() === 'version')!.action(() => undefined);
    await p.parseAsync(argv, { from: 'user' });
  };
  process.env.KCTL_HOST_STATE_DIR = '/from-the-environment';
  await run(['version']);
  assert.equal(hostStateDir(), DEFAULT_HOST_STATE_DIR, 'an environment variable moved it');
  await run(['--host-state-dir', '/srv/kctl-host', 'version']);
  assert.equal(hostStateDir(), '/srv/kctl-host');
  delete process.env.KCTL_HOST_STATE_DIR;
  useHostStateDir(before);
});
