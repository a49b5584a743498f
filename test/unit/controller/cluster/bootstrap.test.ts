import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { test } from 'node:test';
import { BootstrapComponent, bootstrapObjects } from '../../../../src/controller/cluster/bootstrap.ts';
import { parseConfig } from '../../../../src/controller/config/config.ts';
import { KubeClient } from '../../../../src/kube/client.ts';
import { pkiPaths } from '../../../../src/pki/index.ts';
import { captureLogger, initialised, tempDir } from '../../../helpers.ts';
import { fakeApiServer, json } from '../../kube/fake-apiserver.ts';

test(
  'bootstrap applies every object with server-side apply as field manager kctl, retrying until the API answers',
  { timeout: 20_000 },
  async (t) => {
    const pki = pkiPaths(await tempDir(t));
    await writeFile(pki.caCert, 'CA PEM\n');
    const cfg = parseConfig({ spec: { api: { address: '10.0.0.1' } } }, 'test');
    let first = true;
    const api = await fakeApiServer(t, (req, res) => {
      if (first) {
        first = false;
        return json(res, 503, { kind: 'Status', code: 503, reason: 'ServiceUnavailable', message: 'starting' });
      }
      if (req.method !== 'PATCH') return json(res, 404, { kind: 'Status', code: 404, reason: 'NotFound' });
      json(res, 200, JSON.parse(req.body) as unknown);
    });
    const bootstrap = await initialised(
      new BootstrapComponent(cfg, pki, new KubeClient({ server: api.url })),
      captureLogger().log,
    );
    await bootstrap.ready(AbortSignal.timeout(15_000));
    const want = bootstrapObjects(cfg, 'CA PEM\n');
    const applied = api.requests.filter((r) => r.method === 'PATCH').slice(-want.length);
    // The binding that let kube-controller-manager approve every join is removed (absent is fine).
    assert.deepEqual(
      api.requests.filter((r) => r.method === 'DELETE').map((r) => r.path),
      ['/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kctl:bootstrappers:nodeclient-autoapprove'],
    );
    assert.deepEqual(
      applied.map((r) => JSON.parse(r.body) as unknown),
      want,
    );
    assert.ok(
      applied.every(
        (r) =>
          r.method === 'PATCH' &&
          r.headers['content-type'] === 'application/apply-patch+yaml' &&
          r.query.get('fieldManager') === 'kctl' &&
          r.query.get('force') === 'true',
      ),
    );
    assert.deepEqual(
      applied.map((r) => decodeURIComponent(r.path)),
      [
        '/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/kctl-node-pod-ranges',
        '/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/kctl-node-pod-ranges',
        '/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/kctl-node-address-keepers',
        '/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/kctl-node-address-keepers',
        '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kctl:bootstrappers:node-bootstrapper',
        '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kctl:nodes:selfnodeclient-autoapprove',
        '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kctl:nodes:node-proxier',
        '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kctl:apiserver-kubelet-client',
        '/api/v1/namespaces/kube-public/configmaps/cluster-info',
        '/api/v1/namespaces/kctl-controllers',
        '/apis/rbac.authorization.k8s.io/v1/namespaces/kctl-controllers/roles/kctl:controller-lease-reader',
        '/apis/rbac.authorization.k8s.io/v1/namespaces/kctl-controllers/rolebindings/kctl:controller-lease-reader',
        '/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/roles/kctl:upgrade-plan-reader',
        '/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings/kctl:upgrade-plan-reader',
        '/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/roles/kctl:pod-network-reader',
        '/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings/kctl:pod-network-reader',
        '/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/roles/kctl:worker-profiles-reader',
        '/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings/kctl:worker-profiles-reader',
        '/apis/rbac.authorization.k8s.io/v1/namespaces/kube-public/roles/kctl:cluster-info-reader',
        '/apis/rbac.authorization.k8s.io/v1/namespaces/kube-public/rolebindings/kctl:cluster-info-reader',
      ],
    );
  },
);

test('nodes may not write their own pod range: a built-in admission policy for requests by system:nodes, bound to deny', () => {
  const objects = bootstrapObjects(parseConfig({ spec: { api: { address: '10.0.0.1' } } }, 'test'), 'CA PEM\n');
  interface Policy {
    metadata: { name: string };
    spec: { matchConditions: { expression: string }[]; validations: { expression: string; message: string }[] };
  }
  const byKind = (kind: string): unknown => JSON.parse(JSON.stringify(objects.find((o) => o.kind === kind)));
  const policy = byKind('ValidatingAdmissionPolicy') as Policy;
  const binding = byKind('ValidatingAdmissionPolicyBinding') as {
    spec: { policyName: string; validationActions: string[] };
  };
  assert.equal(binding.spec.policyName, policy.metadata.name);
  assert.deepEqual(binding.spec.validationActions, ['Deny']);
  assert.match(policy.spec.matchConditions[0]!.expression, /'system:nodes'/);
  assert.deepEqual(
    policy.spec.validations.map((v) => /spec\.(podCIDRs?)/.exec(v.message)?.[1]),
    ['podCIDR', 'podCIDRs'],
  );
});
