// The api-only profile: the Kubernetes API alone for CRDs and operators. What it runs, with
// which flags, on which ports, and what it refuses.
import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { apiserverArgs } from '../../../src/controller/components/apiserver.ts';
import { parseConfig } from '../../../src/controller/config/config.ts';
import { controllerComponents } from '../../../src/controller/index.ts';
import { controllerPorts } from '../../../src/controller/components/ports.ts';
import { controllerPaths } from '../../../src/controller/config/paths.ts';
import { API_ONLY_CONTROLLERS, controllerManagerArgs } from '../../../src/controller/components/controller-manager.ts';
import { pkiPaths } from '../../../src/pki/index.ts';
import { tempDir } from '../../helpers.ts';

const RELEASE = { version: '0.1.0', kubernetes: 'v1.36.3', etcd: 'v3.6.14' };

const paths = controllerPaths('/var/lib/kctl', '/run/kctl');
const pki = pkiPaths('/var/lib/kctl/pki');
const flag = (args: string[], name: string) => args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);

test('api-only: from the config or the flag; kine by default (etcd when asked); add-ons off, and turning one on is refused', () => {
  const cfg = parseConfig({ spec: { api: { address: '10.0.0.1' }, profile: 'api-only' } }, 'kctl.yaml');
  assert.equal(cfg.spec.profile, 'api-only');
  assert.equal(cfg.spec.storage.type, 'kine');
  assert.equal(cfg.spec.addons.coredns.enabled, false);
  assert.equal(cfg.spec.addons.metricsServer.enabled, false);
  assert.equal(parseConfig({}, 'defaults', { apiOnly: true }).spec.profile, 'api-only');
  assert.equal(
    parseConfig({ spec: { profile: 'api-only', storage: { type: 'etcd' } } }, 'kctl.yaml').spec.storage.type,
    'etcd',
  );
  assert.equal(parseConfig({}, 'defaults').spec.profile, 'full');
  assert.throws(
    () => parseConfig({ spec: { profile: 'api-only', addons: { coredns: { enabled: true } } } }, 'kctl.yaml'),
    /spec\.addons\.coredns\.enabled: an api-only control plane has no nodes to run add-ons on/,
  );
  assert.throws(
    () => parseConfig({ spec: { profile: 'apionly' } }, 'kctl.yaml'),
    /spec\.profile: .*"full".*"api-only"/,
  );
});

test('api-only runs storage, kube-apiserver, the manifest applier, a trimmed controller-manager and the certificate renewer, on their ports only', async (t) => {
  const cfg = parseConfig({ spec: { api: { address: '10.0.0.1' }, profile: 'api-only' } }, 'kctl.yaml');
  // Components are only built here, never started: an admin kubeconfig that names a server is enough.
  const dir = await tempDir(t);
  await mkdir(join(dir, 'pki'));
  await writeFile(
    join(dir, 'pki', 'admin.conf'),
    'clusters: [{ cluster: { server: "https://10.0.0.1:6443" } }]\nusers: [{ user: { token: x } }]\n',
  );
  const pki = pkiPaths(join(dir, 'pki'));
  const names = controllerComponents({ cfg, paths, pki, release: RELEASE }).map((c) => c.name);
  assert.deepEqual(names, [
    'status',
    'kine',
    'encryption',
    'kube-apiserver',
    'manifest-applier',
    'kube-controller-manager',
    'pki-renewer',
  ]);
  assert.deepEqual(Object.keys(controllerPorts(cfg)), ['kube-apiserver', 'kube-controller-manager']);
  const full = controllerComponents({
    cfg: parseConfig({ spec: { api: { address: '10.0.0.1' } } }, 'kctl.yaml'),
    paths,
    pki,
    release: RELEASE,
  });
  assert.ok(
    ['konnectivity-server', 'kube-scheduler', 'csr-approver', 'pki-renewer'].every((n) =>
      full.some((c) => c.name === n),
    ),
  );
  // The add-ons, kube-scheduler and kube-controller-manager start once kube-apiserver is ready, beside kctl's bootstrap.
  assert.deepEqual(
    full.filter((c) => c.startAfter).map((c) => [c.name, c.startAfter]),
    [
      ['manifest-applier', 'kube-apiserver'],
      ['kube-scheduler', 'kube-apiserver'],
      ['kube-controller-manager', 'kube-apiserver'],
    ],
  );
});

test('api-only kube-apiserver: no egress selector, RBAC only, no kubelet or bootstrap-token flags; controller-manager runs only its list', () => {
  const cfg = parseConfig({ spec: { api: { address: '10.0.0.1' }, profile: 'api-only' } }, 'kctl.yaml');
  const api = apiserverArgs(cfg, paths, pki, { egress: true });
  assert.equal(flag(api, 'egress-selector-config-file'), undefined);
  assert.equal(flag(api, 'authorization-mode'), 'RBAC');
  for (const f of [
    'kubelet-client-certificate',
    'enable-bootstrap-token-auth',
    'enable-aggregator-routing',
    'api-audiences',
  ])
    assert.equal(flag(api, f), undefined, f);
  assert.ok(flag(api, 'requestheader-client-ca-file'), 'the aggregation layer stays');
  const kcm = controllerManagerArgs(cfg, pki);
  assert.equal(flag(kcm, 'controllers'), API_ONLY_CONTROLLERS.join(','));
  assert.equal(flag(kcm, 'leader-elect'), 'false');
  assert.equal(flag(kcm, 'allocate-node-cidrs'), undefined);
  assert.equal(flag(kcm, 'cluster-signing-key-file'), undefined);
  // The full profile keeps everything the nodes need.
  const full = parseConfig({ spec: { api: { address: '10.0.0.1' } } }, 'kctl.yaml');
  assert.equal(flag(apiserverArgs(full, paths, pki, { egress: true }), 'authorization-mode'), 'Node,RBAC');
  assert.equal(flag(controllerManagerArgs(full, pki), 'controllers'), '*,bootstrapsigner,tokencleaner');
});
