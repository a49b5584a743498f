import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  canonicalIp,
  cidrAddress,
  httpsUrl,
  ipv4FromNumber,
  ipv4Range,
  joinHostPort,
  splitHostPort,
  urlHost,
} from '../../../src/base/addresses.ts';

test('IP addresses compare in one canonical spelling', () => {
  assert.equal(canonicalIp('2001:DB8:0:0::10'), '2001:db8::10');
  assert.equal(canonicalIp('fe80::1%eth0'), 'fe80::1');
  assert.equal(canonicalIp('::ffff:192.0.2.1'), '::ffff:c000:201');
  assert.equal(canonicalIp('010.1.2.3'), null, 'leading zeros are ambiguous, not an IP');
  assert.equal(canonicalIp('example.com'), null);
});

test('host:port joins and splits with IPv6 in brackets', () => {
  assert.equal(joinHostPort('10.0.0.1', 8132), '10.0.0.1:8132');
  assert.equal(joinHostPort('::1', 8132), '[::1]:8132');
  assert.deepEqual(splitHostPort('[2001:DB8::0:1]:6443'), { host: '2001:db8::1', port: 6443 });
  assert.deepEqual(splitHostPort('Ctrl.Example:443'), { host: 'ctrl.example', port: 443 });
  assert.equal(splitHostPort('::1:443'), null, 'IPv6 without brackets is ambiguous');
  assert.equal(splitHostPort('host:0'), null);
  assert.equal(splitHostPort('host:70000'), null);
  assert.equal(splitHostPort('host'), null);
});

test('server URLs bracket IPv6 literals', () => {
  assert.equal(httpsUrl('192.0.2.1', 6443), 'https://192.0.2.1:6443');
  assert.equal(httpsUrl('2001:db8:0::1', 6443), 'https://[2001:db8::1]:6443');
  assert.equal(httpsUrl('api.example.test', 443), 'https://api.example.test:443');
  assert.equal(urlHost('https://[2001:db8::1]:6443/x'), '2001:db8::1');
  assert.equal(urlHost('https://10.0.0.1:6443'), '10.0.0.1');
});

test('the n-th address of a CIDR counts from the network address', () => {
  assert.equal(cidrAddress('10.96.0.0/12', 1), '10.96.0.1');
  assert.equal(cidrAddress('10.96.0.0/12', 10), '10.96.0.10');
  assert.equal(cidrAddress('10.100.3.7/16', 1), '10.100.0.1', 'host bits are ignored');
  assert.equal(cidrAddress('fd00:10:96::/108', 10), 'fd00:10:96::a');
  assert.equal(cidrAddress('10.0.0.0/24', 254), '10.0.0.254');
  assert.throws(() => cidrAddress('10.0.0.0/24', 255), /no room for address number 255/);
  assert.throws(() => cidrAddress('10.0.0.0', 1), /"10\.0\.0\.0" is not a CIDR/);
  assert.throws(() => cidrAddress('10.0.0.0/33', 1), /is not a CIDR/);
});

test('ipv4Range: an IPv4 CIDR or address as numbers (network address first); anything else is undefined', () => {
  const r = ipv4Range('10.0.1.7/24');
  assert.deepEqual(r && { bits: r.bits, first: ipv4FromNumber(r.first), last: ipv4FromNumber(r.last) }, {
    bits: 24,
    first: '10.0.1.0',
    last: '10.0.1.255',
  });
  assert.equal(ipv4Range('192.0.2.5')?.bits, 32);
  assert.equal(ipv4Range('0.0.0.0/0')?.last, 2n ** 32n - 1n);
  for (const bad of ['10.0.0.1/33', '10.0.0.1/', '10.0.0.1%eth0', '2001:db8::/32', '300.1.1.1', '10.0.0.1; drop', ''])
    assert.equal(ipv4Range(bad), undefined, bad);
});

test('a CIDR as a numeric range, only when its address is the network', async () => {
  const { cidrRange } = await import('../../../src/base/addresses.ts');
  assert.deepEqual(cidrRange('10.244.1.0/24'), { family: 4, bits: 24, first: 0x0af40100n, last: 0x0af401ffn });
  assert.deepEqual(cidrRange('0.0.0.0/0'), { family: 4, bits: 0, first: 0n, last: 0xffffffffn });
  assert.equal(cidrRange('fd00::/64')?.last, (0xfd00n << 112n) + (1n << 64n) - 1n);
  for (const bad of [
    '10.244.1.7/24',
    '10.244.1.0',
    '10.244.1.0/33',
    'fd00::/129',
    'x/8',
    'fe80::/64%eth0',
    '10.0.0.0/024x',
  ])
    assert.equal(cidrRange(bad), undefined, bad);
});
