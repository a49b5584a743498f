// The KctlCluster CRD made from ClusterConfig's schema: spec.config has every field of a config
// file's spec with its enums, bounds and CEL rules, and none of what a CRD's structural schema
// does not take (defaults, additionalProperties beside properties, JSON Schema's own keywords).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { clusterConfigSchema } from '../../../src/controller/config/config.ts';
import { configSpecSchema, kctlClusterCrd, structural } from '../../../src/operator/crd.ts';

type Node = Record<string, unknown>;

/** Every schema node under `n`, with its path. */
function* nodes(n: unknown, path = ''): Generator<[string, Node]> {
  if (n === null || typeof n !== 'object' || Array.isArray(n)) return;
  yield [path, n as Node];
  for (const [k, v] of Object.entries(n as Node)) {
    if (k === 'properties') for (const [p, s] of Object.entries(v as Node)) yield* nodes(s, `${path}.${p}`);
    else if (k === 'items' || k === 'additionalProperties') yield* nodes(v, `${path}[${k}]`);
  }
}

test("spec.config has a config file's spec fields, each with a type, without defaults or closed maps", () => {
  const config = configSpecSchema();
  assert.deepEqual(
    Object.keys(config.properties as Node).sort(),
    Object.keys(clusterConfigSchema.shape.spec.unwrap().shape).sort(),
  );
  for (const [path, n] of nodes(config)) {
    assert.ok('type' in n, `${path} has no type`);
    for (const k of ['default', '$schema', 'propertyNames', 'const']) assert.ok(!(k in n), `${path} keeps ${k}`);
    assert.ok(!(n.additionalProperties === false), `${path} keeps additionalProperties: false`);
  }
  const at = (path: string) => [...nodes(config)].find(([p]) => p === path)?.[1];
  assert.deepEqual(at('.profile')?.enum, ['full', 'api-only']);
  assert.deepEqual(at('.api.port'), { type: 'integer', minimum: 1, maximum: 65535 });
  assert.match(JSON.stringify(at('.network.podCIDR')), /isCIDR\(self\)/);
  assert.match(
    JSON.stringify(at('.konnectivity.trustedAgents[items]')),
    /has\(self\.node\) != has\(self\.serviceAccount\)/,
  );
  assert.equal(at('.api.encryption.resources')?.['x-kubernetes-list-type'], 'set');
  // A map of names keeps its value type.
  assert.deepEqual(at('.api.extraArgs'), { type: 'object', additionalProperties: { type: 'string' } });
});

test('structural() drops what a CRD does not take and turns a constant into a one-value enum', () => {
  assert.deepEqual(
    structural({
      $schema: 'x',
      type: 'object',
      default: {},
      additionalProperties: false,
      properties: {
        kind: { const: 'A', default: 'A' },
        m: { type: 'object', propertyNames: {}, additionalProperties: { type: 'string' } },
      },
    }),
    {
      type: 'object',
      properties: { kind: { enum: ['A'] }, m: { type: 'object', additionalProperties: { type: 'string' } } },
    },
  );
});

test('the CRD: namespaced, a status subresource, printer columns, version required', () => {
  const crd = kctlClusterCrd() as { metadata: Node; spec: { scope: string; versions: Node[] } };
  assert.equal(crd.metadata.name, 'kctlclusters.kctl.dev');
  assert.equal(crd.spec.scope, 'Namespaced');
  const v = crd.spec.versions[0] as { subresources: Node; additionalPrinterColumns: { name: string }[]; schema: Node };
  assert.deepEqual(v.subresources, { status: {} });
  assert.deepEqual(
    v.additionalPrinterColumns.map((c) => c.name),
    ['Ready', 'Profile', 'Version', 'Kubernetes', 'Nodes', 'Endpoint', 'Age'],
  );
  const spec = ((v.schema.openAPIV3Schema as Node).properties as Node).spec as Node;
  assert.deepEqual(spec.required, ['version']);
  // A kept Secret's anchor in the tenant, kctl-kept-<secretName>, is a Secret name too.
  const accounts = (spec.properties as Node).serviceAccounts as { items: { properties: Node } };
  const secretName = accounts.items.properties.secretName as { maxLength: number };
  assert.equal(`kctl-kept-${'x'.repeat(secretName.maxLength)}`.length, 253);
});
