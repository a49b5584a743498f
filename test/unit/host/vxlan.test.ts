import { test } from 'node:test';
import assert from 'node:assert/strict';
import { cidrAddress } from '../../../src/base/addresses.ts';
import { vtepMac } from '../../../src/host/vxlan.ts';

const cidrNetwork = (cidr: string) => cidrAddress(cidr, 0);

test('a VTEP MAC is locally administered, unicast, and carries the VTEP address', () => {
  const mac = vtepMac('10.244.3.0');
  assert.equal(mac, '0e:6b:0a:f4:03:00');
  const first = Number.parseInt(mac.slice(0, 2), 16);
  assert.equal(first & 0b10, 0b10, 'locally administered bit');
  assert.equal(first & 0b01, 0, 'unicast');
  assert.notEqual(vtepMac('10.244.4.0'), mac);
});

test('the network address of a pod CIDR, whatever host bits it was written with', () => {
  assert.equal(cidrNetwork('10.244.3.0/24'), '10.244.3.0');
  assert.equal(cidrNetwork('10.244.3.77/24'), '10.244.3.0');
  assert.equal(cidrNetwork('172.16.200.9/20'), '172.16.192.0');
  assert.equal(cidrNetwork('10.1.2.3/32'), '10.1.2.3');
  assert.equal(cidrNetwork('10.1.2.3/0'), '0.0.0.0');
});
