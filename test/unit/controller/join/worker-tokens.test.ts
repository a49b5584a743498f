// What kctl keeps on a worker token (--node-name, --uses, the nodes that joined) and reads back.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  JOINED_ANNOTATION,
  NODE_NAME,
  tokenRefusal,
  workerTokenAnnotations,
  workerTokenRecord,
} from '../../../../src/controller/join/worker-tokens.ts';

test('a worker token records its node name and uses as annotations, and reads them back with the nodes that joined', () => {
  assert.deepEqual(workerTokenAnnotations({}), {}, 'a plain token: unlimited joins, any unregistered name');
  const a = workerTokenAnnotations({ nodeName: 'edge-1', uses: 3 });
  assert.deepEqual(workerTokenRecord('abcdef', { ...a, [JOINED_ANNOTATION]: 'edge-1' }), {
    id: 'abcdef',
    nodeName: 'edge-1',
    uses: 3,
    joined: ['edge-1'],
  });
  assert.deepEqual(workerTokenRecord('abcdef', undefined), {
    id: 'abcdef',
    nodeName: undefined,
    uses: undefined,
    joined: [],
  });
  // A mangled count is no limit rather than a crash; the approver still denies registered names.
  assert.equal(workerTokenRecord('abcdef', { 'kctl.dev/uses': 'lots' }).uses, undefined);
});

test('the token rules in order: bound name, then uses (a repeated join is not a new one)', () => {
  const t = { id: 'abcdef', joined: ['a'], uses: 1 };
  assert.equal(tokenRefusal(t, 'a'), undefined);
  assert.equal(tokenRefusal(t, 'b'), 'token abcdef is used up (1 join)');
  assert.equal(tokenRefusal({ ...t, nodeName: 'a' }, 'b'), 'token abcdef was made for node a only');
  assert.equal(tokenRefusal({ id: 'abcdef', joined: ['a', 'b', 'c'] }, 'd'), undefined, 'no --uses: unlimited');
});

test('node names as Kubernetes allows them', () => {
  for (const ok of ['edge-1', 'a', 'node.site.example', '1n']) assert.ok(NODE_NAME.test(ok), ok);
  for (const bad of ['Edge', '-a', 'a-', 'a..b', 'a_b', '', 'system:node:a']) assert.ok(!NODE_NAME.test(bad), bad);
});
