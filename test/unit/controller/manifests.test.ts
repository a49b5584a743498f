import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseStack } from '../../../src/controller/manifests.ts';

test('a stack parses into objects; bad YAML and non-objects are reported with file and line', () => {
  const ok = parseStack([
    {
      name: 'demo/a.yaml',
      text: 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n',
    },
  ]);
  assert.deepEqual(
    ok.objects.map((o) => o.metadata.name),
    ['a', 'b'],
  );
  assert.deepEqual(ok.errors, []);
  const bad = parseStack([
    { name: 'demo/a.yaml', text: 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n' },
    { name: 'demo/b.yaml', text: 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n' },
    { name: 'demo/c.yaml', text: 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\njust: a map\n' },
  ]);
  assert.equal(bad.errors.length, 2);
  assert.match(bad.errors[0]!, /^demo\/b\.yaml:\d+: /);
  assert.equal(bad.errors[1], 'demo/c.yaml:5: not a Kubernetes object (apiVersion, kind and metadata.name are required)');
});
