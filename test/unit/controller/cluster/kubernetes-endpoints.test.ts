// The kubernetes Service's endpoints behind a front door: the node-local address once every node
// serves it, the controllers' API addresses while a node of an older kctl remains.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  endpointsPlan,
  kubernetesEndpoints,
  NODE_LOCAL_API_SINCE,
} from '../../../../src/controller/cluster/kubernetes-endpoints.ts';
import { nodesBefore } from '../../../../src/controller/nodes/nodes.ts';
import { apiserverArgs } from '../../../../src/controller/components/apiserver.ts';
import { parseConfig } from '../../../../src/controller/config/config.ts';
import { controllerPaths } from '../../../../src/controller/config/paths.ts';
import { pkiPaths } from '../../../../src/pki/index.ts';

const controllers = [{ apiServer: 'https://10.0.0.2:6443' }, { apiServer: 'https://10.0.0.1:6443' }];

test('the node-local address is the endpoint only once no node of an older kctl remains', () => {
  const base = { nodeLocal: '198.18.0.1:6443', apiPort: 6443, controllers, ownAddress: '10.0.0.1' };
  assert.deepEqual(endpointsPlan({ ...base, olderNodes: [] }), {
    addresses: ['198.18.0.1'],
    port: 6443,
    nodeLocal: true,
  });
  assert.deepEqual(endpointsPlan({ ...base, olderNodes: ['w1'] }), {
    addresses: ['10.0.0.1', '10.0.0.2'],
    port: 6443,
    nodeLocal: false,
  });
  // Before the first lease is read, this controller's own address.
  assert.deepEqual(endpointsPlan({ ...base, controllers: [], olderNodes: ['w1'] }).addresses, ['10.0.0.1']);
  const versions = new Map<string, string | undefined>([
    ['new', NODE_LOCAL_API_SINCE],
    ['prev', `${NODE_LOCAL_API_SINCE}-prev.1`],
    ['silent', undefined],
    ['liar', 'not-a-version'],
  ]);
  assert.deepEqual(nodesBefore(versions, NODE_LOCAL_API_SINCE), ['liar', 'prev', 'silent']);
});

test('Endpoints (not mirrored) and an EndpointSlice of the kubernetes Service, as kube-apiserver writes them', () => {
  const [endpoints, slice] = kubernetesEndpoints(['198.18.0.1'], 6443);
  assert.deepEqual(endpoints, {
    apiVersion: 'v1',
    kind: 'Endpoints',
    metadata: {
      name: 'kubernetes',
      namespace: 'default',
      labels: { 'endpointslice.kubernetes.io/skip-mirror': 'true' },
    },
    subsets: [{ addresses: [{ ip: '198.18.0.1' }], ports: [{ name: 'https', port: 6443, protocol: 'TCP' }] }],
  });
  assert.equal(slice?.kind, 'EndpointSlice');
  assert.deepEqual(slice?.metadata.labels, { 'kubernetes.io/service-name': 'kubernetes' });
  assert.equal(slice?.addressType, 'IPv4');
  assert.deepEqual(slice?.endpoints, [{ addresses: ['198.18.0.1'], conditions: { ready: true } }]);
});

test("behind a front door kube-apiserver leaves the kubernetes Service's endpoints to kctl; with only the door open it listens on loopback", () => {
  const flag = (name: string, spec: object) =>
    apiserverArgs(parseConfig({ spec }, 'kctl.yaml'), controllerPaths('/d', '/r'), pkiPaths('/d/pki'), {
      egress: true,
    }).find((a) => a.startsWith(`--${name}=`));
  const door = { enabled: true, baseDomain: 'c.example.com' };
  assert.equal(flag('endpoint-reconciler-type', {}), undefined);
  assert.equal(flag('endpoint-reconciler-type', { frontDoor: door }), '--endpoint-reconciler-type=none');
  assert.equal(flag('bind-address', { frontDoor: door }), '--bind-address=0.0.0.0');
  assert.equal(flag('bind-address', { frontDoor: { ...door, only: true } }), '--bind-address=127.0.0.1');
});
