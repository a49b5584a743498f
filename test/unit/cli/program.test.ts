import assert from 'node:assert/strict';
import { test } from 'node:test';
import { COMMANDS, buildProgram, commandOf } from '../../../src/cli/program.ts';

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
