import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseConfig } from '../../../src/controller/config.ts';
import { trustedAgents } from '../../../src/controller/konnectivity.ts';

const withTrusted = (list: unknown) => parseConfig({ spec: { api: { address: '10.0.0.1' }, konnectivity: { trustedAgents: list } } }, 'kctl.yaml');

test('spec.konnectivity.trustedAgents: nobody by default; nodes by name, service accounts as NAMESPACE/NAME', () => {
  assert.deepEqual(trustedAgents(parseConfig({}, 'defaults')), { nodes: [], users: [] });
  const cfg = withTrusted([{ node: 'site-gw' }, { serviceAccount: 'kube-system/konnectivity-agent' }]);
  assert.deepEqual(trustedAgents(cfg), { nodes: ['site-gw'], users: ['system:serviceaccount:kube-system:konnectivity-agent'] });
});

test('a trusted agent entry needs exactly one of node or serviceAccount, well formed; the error names the field', () => {
  assert.throws(
    () => withTrusted([{ node: 'a', serviceAccount: 'ns/b' }]),
    /spec\.konnectivity\.trustedAgents\.0: set exactly one of node or serviceAccount/,
  );
  assert.throws(() => withTrusted([{}]), /trustedAgents\.0: set exactly one of node or serviceAccount/);
  assert.throws(() => withTrusted([{ serviceAccount: 'konnectivity-agent' }]), /trustedAgents\.0\.serviceAccount: expected NAMESPACE\/NAME/);
  assert.throws(() => withTrusted([{ nodes: 'a' }]), /trustedAgents\.0: unknown field\(s\) "nodes"/);
});
