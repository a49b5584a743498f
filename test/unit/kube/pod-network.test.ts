import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parsePodNetwork, podNetworkConfigMap } from '../../../src/kube/pod-network.ts';

test('the pod network ConfigMap reads back as it was written', () => {
  const n = {
    mode: 'vxlan' as const,
    relay: 'controllers' as const,
    policy: true,
    vxlan: { vni: 42, port: 4789 },
    wireguard: { port: 51999 },
  };
  const cm = podNetworkConfigMap(n);
  assert.deepEqual(parsePodNetwork(cm.data), n);
});

test('a damaged pod network ConfigMap is refused naming the key', () => {
  const good = { mode: 'vxlan', vxlanVNI: '1', vxlanPort: '8472' };
  assert.throws(
    () => parsePodNetwork({ ...good, mode: 'gre' }),
    /mode is "gre", expected one of routes, vxlan, wireguard/,
  );
  assert.throws(() => parsePodNetwork({ ...good, vxlanVNI: '0' }), /vxlanVNI is "0", expected 1-16777215/);
  assert.throws(() => parsePodNetwork({ ...good, vxlanPort: '70000' }), /vxlanPort is "70000"/);
  assert.throws(() => parsePodNetwork({ ...good, vxlanPort: '8472x' }), /vxlanPort/);
  assert.throws(() => parsePodNetwork({ ...good, wireguardPort: '0' }), /wireguardPort is "0"/);
  assert.throws(() => parsePodNetwork(undefined), /mode is undefined/);
  assert.throws(() => parsePodNetwork({ ...good, policy: 'yes' }), /policy is "yes", expected true or false/);
  // Written before policies existed: that cluster never enforced them, and still does not.
  assert.equal(parsePodNetwork(good).policy, false);
  // Written before the wireguard mode existed: its port is the default.
  assert.equal(parsePodNetwork(good).wireguard.port, 51820);
  // Written before relaying through the controllers: relay nodes only.
  assert.equal(parsePodNetwork(good).relay, 'none');
  assert.throws(
    () => parsePodNetwork({ ...good, relay: 'everyone' }),
    /relay is "everyone", expected one of none, controllers/,
  );
});

test("the cluster's pod range shape reads back, and a damaged one is refused naming the key", () => {
  const n = {
    mode: 'wireguard' as const,
    relay: 'none' as const,
    policy: true,
    vxlan: { vni: 1, port: 8472 },
    wireguard: { port: 51820 },
    ranges: { clusterCIDR: '10.244.0.0/16', nodeBits: 24, serviceCIDR: '10.96.0.0/12' },
  };
  const cm = podNetworkConfigMap(n);
  assert.equal(cm.data.clusterCIDR, '10.244.0.0/16');
  assert.deepEqual(parsePodNetwork(cm.data), n);
  assert.throws(
    () => parsePodNetwork({ ...cm.data, clusterCIDR: '10.244.0.1/16' }),
    /clusterCIDR is "10.244.0.1\/16", expected a CIDR/,
  );
  assert.throws(() => parsePodNetwork({ ...cm.data, nodeRangeBits: '0' }), /nodeRangeBits is "0", expected 1-128/);
  // Written before ranges were published: the worker falls back to its join token's CIDR.
  assert.throws(() => parsePodNetwork({ ...cm.data, serviceCIDR: 'ten' }), /serviceCIDR is "ten", expected a CIDR/);
  const { clusterCIDR: _c, nodeRangeBits: _b, serviceCIDR: _s, ...older } = cm.data;
  assert.equal(parsePodNetwork(older).ranges, undefined);
});
