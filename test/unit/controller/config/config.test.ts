import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parse } from 'yaml';
import { leafValidityMs, parseConfig } from '../../../../src/controller/config/config.ts';
import { controllerManagerArgs } from '../../../../src/controller/components/controller-manager.ts';
import { pkiPaths } from '../../../../src/pki/index.ts';
import { egressSelectorConfig, trustedAgents } from '../../../../src/controller/components/konnectivity.ts';
import { controllerPaths } from '../../../../src/controller/config/paths.ts';
import { frontDoorNames } from '../../../../src/controller/config/front-door.ts';
import { frontDoorEndpoint, userApiUrl } from '../../../../src/controller/config/urls.ts';
import { pkiOptions } from '../../../../src/controller/pki/pki-renewer.ts';

const withTrusted = (list: unknown) =>
  parseConfig({ spec: { api: { address: '10.0.0.1' }, konnectivity: { trustedAgents: list } } }, 'kctl.yaml');

test('spec.konnectivity.trustedAgents: nobody by default; nodes by name, service accounts as NAMESPACE/NAME', () => {
  assert.deepEqual(trustedAgents(parseConfig({}, 'defaults')), { nodes: [], users: [] });
  const cfg = withTrusted([{ node: 'site-gw' }, { serviceAccount: 'kube-system/konnectivity-agent' }]);
  assert.deepEqual(trustedAgents(cfg), {
    nodes: ['site-gw'],
    users: ['system:serviceaccount:kube-system:konnectivity-agent'],
  });
});

test('a trusted agent entry needs exactly one of node or serviceAccount, well formed; the error names the field', () => {
  assert.throws(
    () => withTrusted([{ node: 'a', serviceAccount: 'ns/b' }]),
    /spec\.konnectivity\.trustedAgents\.0: set exactly one of node or serviceAccount/,
  );
  assert.throws(() => withTrusted([{}]), /trustedAgents\.0: set exactly one of node or serviceAccount/);
  assert.throws(
    () => withTrusted([{ serviceAccount: 'konnectivity-agent' }]),
    /trustedAgents\.0\.serviceAccount: expected NAMESPACE\/NAME/,
  );
  assert.throws(() => withTrusted([{ nodes: 'a' }]), /trustedAgents\.0: unknown field\(s\) "nodes"/);
});

test('spec.konnectivity.proxyProtocol: kube-apiserver dials through HTTP-CONNECT by default, GRPC on request, each on its own socket', () => {
  const paths = controllerPaths('/var/lib/kctl', '/run/kctl');
  const egress = (konnectivity: unknown) => {
    const cfg = parseConfig({ spec: { konnectivity } }, 'kctl.yaml');
    return parse(egressSelectorConfig(paths, cfg.spec.konnectivity.proxyProtocol)) as { egressSelections: unknown[] };
  };
  assert.deepEqual(egress({}).egressSelections, [
    {
      name: 'cluster',
      connection: {
        proxyProtocol: 'HTTPConnect',
        transport: { uds: { udsName: '/run/kctl/konnectivity-connect.sock' } },
      },
    },
  ]);
  assert.deepEqual(egress({ proxyProtocol: 'GRPC' }).egressSelections, [
    {
      name: 'cluster',
      connection: { proxyProtocol: 'GRPC', transport: { uds: { udsName: '/run/kctl/konnectivity-server.sock' } } },
    },
  ]);
  assert.throws(() => egress({ proxyProtocol: 'grpc' }), /spec\.konnectivity\.proxyProtocol: .*"HTTPConnect".*"GRPC"/);
});

test('spec.konnectivity.maxUnauthenticatedAgents: 256 by default, a positive whole number when set', () => {
  const cap = (konnectivity: unknown) =>
    parseConfig({ spec: { konnectivity } }, 'kctl.yaml').spec.konnectivity.maxUnauthenticatedAgents;
  assert.equal(cap({}), 256);
  assert.equal(cap({ maxUnauthenticatedAgents: 1000 }), 1000);
  for (const bad of [0, -1, 2.5, '256'])
    assert.throws(
      () => cap({ maxUnauthenticatedAgents: bad }),
      /spec\.konnectivity\.maxUnauthenticatedAgents: /,
      String(bad),
    );
});

test('spec.api.encryption.resources: Secrets by default, an empty list allowed, wildcards and repeats refused with the path', () => {
  const enc = (encryption: unknown) =>
    parseConfig({ spec: { api: { encryption } } }, 'kctl.yaml').spec.api.encryption.resources;
  assert.deepEqual(parseConfig({}, 'defaults').spec.api.encryption.resources, ['secrets']);
  assert.deepEqual(enc({ resources: [] }), []);
  assert.deepEqual(enc({ resources: ['secrets', 'configmaps', 'widgets.example.com'] }), [
    'secrets',
    'configmaps',
    'widgets.example.com',
  ]);
  assert.throws(
    () => enc({ resources: ['*.*'] }),
    /spec\.api\.encryption\.resources\.0: expected a resource such as secrets/,
  );
  assert.throws(() => enc({ resources: ['Secrets'] }), /resources\.0: expected a resource/);
  assert.throws(
    () => enc({ resources: ['secrets', 'secrets'] }),
    /spec\.api\.encryption\.resources: expected each resource once/,
  );
  assert.throws(() => enc({ provider: 'aescbc' }), /spec\.api\.encryption: unknown field\(s\) "provider"/);
});

test('spec.pki.leafValidity: a year by default, at least 10m; kube-controller-manager signs kubelet certificates as long', () => {
  const validity = (pki: unknown) => leafValidityMs(parseConfig({ spec: { pki } }, 'kctl.yaml'));
  assert.equal(validity(undefined), 365 * 24 * 3600_000);
  assert.equal(validity({ leafValidity: '10m' }), 600_000);
  assert.equal(validity({ leafValidity: '90d' }), 90 * 24 * 3600_000);
  for (const bad of ['9m59s', 'soon', '0'])
    assert.throws(
      () => validity({ leafValidity: bad }),
      /invalid config kctl\.yaml: spec\.pki\.leafValidity: expected a duration of at least 10m/,
    );
  const args = controllerManagerArgs(
    parseConfig({ spec: { pki: { leafValidity: '10m' } } }, 'kctl.yaml'),
    pkiPaths('/tmp/pki'),
  );
  assert.ok(args.includes('--cluster-signing-duration=600s'), args.join(' '));
});

test("each node's pod range size: kctl's /24, or what kube-controller-manager's extraArgs set (the tunnel and pod network judge by it)", async () => {
  const { nodePodRangeBits } = await import('../../../../src/controller/components/controller-manager.ts');
  const bits = (extraArgs?: Record<string, string>) =>
    nodePodRangeBits(parseConfig({ spec: { controllerManager: { extraArgs } } }, 'kctl.yaml'));
  assert.equal(bits(), 24);
  assert.equal(bits({ 'node-cidr-mask-size': '26' }), 26);
  assert.equal(bits({ '--node-cidr-mask-size-ipv4': '23', 'node-cidr-mask-size': '26' }), 23);
  const args = controllerManagerArgs(
    parseConfig({ spec: { controllerManager: { extraArgs: { 'node-cidr-mask-size': '26' } } } }, 'kctl.yaml'),
    pkiPaths('/tmp/pki'),
  );
  assert.ok(args.includes('--node-cidr-mask-size=26'), args.join(' '));
});

test('spec.frontDoor: off by default; on, it needs a base domain, and the names come from the tenant, the config or metadata.name', () => {
  assert.deepEqual(parseConfig({}, 'defaults').spec.frontDoor, {
    enabled: false,
    port: 443,
    name: 'kctl',
    nodeLocalAddress: '198.18.0.1',
    only: false,
  });
  assert.throws(
    () => parseConfig({ spec: { frontDoor: { only: true } } }, 'kctl.yaml'),
    /spec\.frontDoor\.only: only closes the ports beside the front door; turn the door on/,
  );
  assert.equal(frontDoorNames(parseConfig({}, 'defaults')), undefined);
  assert.throws(
    () => parseConfig({ spec: { frontDoor: { enabled: true } } }, 'kctl.yaml'),
    /invalid config kctl\.yaml: spec\.frontDoor\.baseDomain: set the domain the cluster names live under/,
  );
  const on = { enabled: true, baseDomain: 'clusters.example.com' };
  // A full cluster's nodes reach its konnectivity server and join endpoint by names one label deeper.
  assert.deepEqual(frontDoorNames(parseConfig({ spec: { frontDoor: on } }, 'kctl.yaml')), {
    api: 'kctl.clusters.example.com',
    konnectivity: 'konnectivity.kctl.clusters.example.com',
    join: 'join.kctl.clusters.example.com',
    nodeApi: 'node-api.kctl.clusters.example.com',
  });
  assert.deepEqual(frontDoorNames(parseConfig({ spec: { profile: 'api-only', frontDoor: on } }, 'kctl.yaml')), {
    api: 'kctl.clusters.example.com',
  });
  assert.equal(
    frontDoorNames(parseConfig({ spec: { frontDoor: on } }, 'alpha.yaml', { tenantName: 'alpha' }))?.api,
    'alpha.clusters.example.com',
  );
  assert.equal(
    frontDoorNames(parseConfig({ spec: { frontDoor: { ...on, name: 'edge-7' } } }, 'kctl.yaml'))?.api,
    'edge-7.clusters.example.com',
  );
  assert.throws(
    () => parseConfig({ metadata: { name: 'My_Cluster' }, spec: { frontDoor: on } }, 'kctl.yaml'),
    /metadata\.name "My_Cluster" cannot be a front door name .*; set spec\.frontDoor\.name/,
  );
  assert.throws(
    () => parseConfig({ spec: { frontDoor: { ...on, baseDomain: 'localhost' } } }, 'kctl.yaml'),
    /spec\.frontDoor\.baseDomain: expected a DNS domain/,
  );
  // The node-local address pods reach the API at: an Endpoints address, outside the cluster's networks.
  for (const [address, expect] of [
    ['127.0.0.2', /spec\.frontDoor\.nodeLocalAddress: expected an IPv4 address that is not loopback, link-local/],
    ['169.254.20.10', /spec\.frontDoor\.nodeLocalAddress: expected an IPv4 address/],
    ['fd00::1', /spec\.frontDoor\.nodeLocalAddress: expected an IPv4 address/],
    [
      '10.96.0.50',
      /spec\.frontDoor\.nodeLocalAddress: 10\.96\.0\.50 is inside spec\.network\.serviceCIDR 10\.96\.0\.0\/12; pick an address outside/,
    ],
    ['10.244.9.9', /is inside spec\.network\.podCIDR 10\.244\.0\.0\/16/],
  ] as const)
    assert.throws(
      () => parseConfig({ spec: { frontDoor: { ...on, nodeLocalAddress: address } } }, 'kctl.yaml'),
      expect,
    );
  assert.equal(
    parseConfig({ spec: { frontDoor: { ...on, nodeLocalAddress: '100.64.30.10' } } }, 'kctl.yaml').spec.frontDoor
      .nodeLocalAddress,
    '100.64.30.10',
  );
  // Only the door open: kube-apiserver, the agent port and the join endpoint on loopback, the
  // control plane's kubeconfigs too; a kubeconfig for someone elsewhere names the door.
  const only = parseConfig({ spec: { api: { address: '10.0.0.5' }, frontDoor: { ...on, only: true } } }, 'kctl.yaml');
  const paths = controllerPaths('/d', '/r');
  assert.equal(pkiOptions(only, paths).kubeconfigHost, '127.0.0.1');
  assert.equal(pkiOptions(only, paths).apiAddress, '10.0.0.5', 'the certificates still name the API address');
  assert.equal(userApiUrl(only), 'https://kctl.clusters.example.com:443');
  const open = parseConfig({ spec: { api: { address: '10.0.0.5' }, frontDoor: on } }, 'kctl.yaml');
  assert.equal(pkiOptions(open, paths).kubeconfigHost, '10.0.0.5');
  assert.equal(userApiUrl(open), 'https://10.0.0.5:6443');
  // Its names are in the servers' certificates, since the door passes TLS through.
  const sans = pkiOptions(parseConfig({ spec: { frontDoor: on } }, 'kctl.yaml'), controllerPaths('/d', '/r')).sans;
  for (const name of ['kctl', 'konnectivity.kctl', 'join.kctl', 'node-api.kctl'])
    assert.ok(sans.includes(`${name}.clusters.example.com`), sans.join(', '));
});

test("spec.frontDoor.external: another program's door (a management cluster's) needs the address nodes dial there, and keeps the ports open", () => {
  const on = { enabled: true, baseDomain: 'clusters.example.com', external: { keyFile: '/etc/kctl/door.key' } };
  assert.throws(
    () => parseConfig({ spec: { frontDoor: on } }, 'kctl.yaml'),
    /spec\.frontDoor\.address: an external door needs the address nodes reach it at/,
  );
  assert.throws(
    () => parseConfig({ spec: { frontDoor: { ...on, address: '0.0.0.0' } } }, 'kctl.yaml'),
    /spec\.frontDoor\.address: an external door needs the address/,
  );
  assert.throws(
    () => parseConfig({ spec: { frontDoor: { ...on, address: '192.0.2.10', only: true } } }, 'kctl.yaml'),
    /spec\.frontDoor\.only: an external door reaches this controller on its own addresses; remove only/,
  );
  assert.throws(
    () =>
      parseConfig(
        { spec: { frontDoor: { ...on, address: '192.0.2.10', external: { keyFile: 'door.key' } } } },
        'kctl.yaml',
      ),
    /spec\.frontDoor\.external\.keyFile: expected an absolute path/,
  );
  const cfg = parseConfig({ spec: { frontDoor: { ...on, address: '192.0.2.10', port: 30443 } } }, 'kctl.yaml');
  assert.deepEqual(cfg.spec.frontDoor.external?.handoffPorts, { konnectivity: 8141, join: 8142, nodeApi: 8143 });
  assert.equal(frontDoorEndpoint(cfg)?.address, '192.0.2.10:30443');
});

test('spec.workerProfiles: none by default; kubelet fields checked with their path, names DNS labels and unique', () => {
  assert.deepEqual(parseConfig({}, 'x').spec.workerProfiles, []);
  const ok = parseConfig({ spec: { workerProfiles: [{ name: 'edge', values: { maxPods: 30 } }] } }, 'x');
  assert.deepEqual(ok.spec.workerProfiles, [{ name: 'edge', values: { maxPods: 30 } }]);
  const refused = (workerProfiles: unknown) => () => parseConfig({ spec: { workerProfiles } }, 'x.yaml');
  assert.throws(
    refused([{ name: 'edge', values: { maxPods: 30, kubeReserved: { cpu: 1 } } }]),
    /^Error: invalid config x.yaml: spec.workerProfiles.0.values.kubeReserved.cpu: expected a string, got 1$/,
  );
  assert.throws(refused([{ name: 'edge', values: { podCIDR: '10.0.0.0/24' } }]), /values.podCIDR: set by kctl/);
  assert.throws(refused([{ name: 'Edge', values: {} }]), /spec.workerProfiles.0.name: expected a profile name/);
  assert.throws(refused([{ name: 'edge' }]), /spec.workerProfiles.0.values/);
  assert.throws(
    refused([
      { name: 'a', values: {} },
      { name: 'a', values: {} },
    ]),
    /spec.workerProfiles: expected each profile name once/,
  );
});
