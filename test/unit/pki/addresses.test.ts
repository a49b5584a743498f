import assert from 'node:assert/strict';
import { test } from 'node:test';
import { firstServiceIps, sameSans, toSan } from '../../../src/pki/addresses.ts';
import { wantedSans } from '../../../src/pki/index.ts';

test('the first service IP is network + 1, for IPv4, IPv6 and dual-stack', () => {
  assert.deepEqual(firstServiceIps('10.96.0.0/12'), ['10.96.0.1']);
  assert.deepEqual(firstServiceIps('10.100.3.7/16'), ['10.100.0.1'], 'host bits in the CIDR are ignored');
  assert.deepEqual(firstServiceIps('fd00:10:96::/108'), ['fd00:10:96::1']);
  assert.deepEqual(firstServiceIps('10.96.0.0/12, fd00::/108'), ['10.96.0.1', 'fd00::1']);
  assert.throws(() => firstServiceIps('10.96.0.0'), /spec\.network\.serviceCIDR: "10\.96\.0\.0" is not a CIDR/);
  assert.throws(() => firstServiceIps('10.96.0.0/32'), /not a CIDR with room/);
});

test('SANs compare in one canonical spelling', () => {
  assert.equal(toSan('0:0:0:0:0:0:0:1', 'x'), 'IP:::1');
  assert.equal(toSan('API.Example.TEST.', 'x'), 'DNS:api.example.test');
  assert.equal(toSan('*.apps.example.test', 'x'), 'DNS:*.apps.example.test');
  assert.throws(() => toSan('a b', 'spec.api.sans'), /spec\.api\.sans: "a b" is neither an IP address nor a DNS name/);
  assert.ok(sameSans(['IP:::1', 'DNS:a'], ['DNS:a', 'IP:::1']));
  assert.ok(!sameSans(['IP:::1'], ['IP:::1', 'DNS:a']));
});

test('apiserver SANs are deduplicated and typed', () => {
  const s = wantedSans({
    dir: '/x',
    apiAddress: '127.0.0.1',
    sans: ['localhost', '::1', '0::1'],
    apiPort: 6443,
    serviceCIDR: '10.96.0.0/12',
    clusterDomain: 'corp.internal',
    hostname: 'Ctrl',
    localAddresses: ['127.0.0.1', '::1'],
  });
  assert.deepEqual(s.apiserver, [
    'IP:127.0.0.1',
    'DNS:localhost',
    'IP:::1',
    'DNS:ctrl',
    'DNS:kubernetes',
    'DNS:kubernetes.default',
    'DNS:kubernetes.default.svc',
    'DNS:kubernetes.default.svc.corp.internal',
    'IP:10.96.0.1',
  ]);
  assert.deepEqual(s.konnectivity, [...s.apiserver, 'DNS:konnectivity']);
  assert.deepEqual(s.etcd, ['DNS:localhost', 'IP:127.0.0.1', 'IP:::1', 'DNS:ctrl']);
});
