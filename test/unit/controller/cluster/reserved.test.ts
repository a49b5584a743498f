// What no node may own: this controller's config and certificate names, the live controllers'
// lease addresses, the cluster's Service and pod networks.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { parseConfig } from '../../../../src/controller/config/config.ts';
import { certificateNames, reservedSpace } from '../../../../src/controller/cluster/reserved.ts';
import { selfSignedCert, tempDir } from '../../../helpers.ts';

test("a controller's names come from its config, its serving certificates' SANs and the live controllers' leases", async (t) => {
  const dir = await tempDir(t);
  const cert = selfSignedCert(dir, 'server', {
    cn: 'kube-apiserver',
    san: 'DNS:Ctl-1.Example,IP:10.0.0.9,IP:fd00:0::9',
  });
  assert.deepEqual(certificateNames(cert.cert), ['ctl-1.example', '10.0.0.9', 'fd00::9']);
  assert.deepEqual(certificateNames(join(dir, 'missing.crt')), [], 'an unreadable file names nothing');
  const cfg = parseConfig({ spec: { api: { address: '192.0.2.2', sans: ['api.example'] } } }, 'kctl.yaml');
  const live = [{ name: 'c2', apiServer: 'https://[2001:db8::7]:6443', konnectivity: 'c2.example:8132', agents: [] }];
  const r = reservedSpace(cfg, { certificates: [cert.cert], controllers: { liveControllers: () => live } });
  for (const v of ['192.0.2.2', 'api.example', 'ctl-1.example', '10.0.0.9', 'fd00::9', '2001:db8::7', 'c2.example'])
    assert.ok(r.isController(v), v);
  for (const v of ['10.0.0.10', 'node-1', '2001:db8::8']) assert.equal(r.isController(v), false, v);
  assert.deepEqual([r.serviceCIDRs, r.podCIDRs], [['10.96.0.0/12'], ['10.244.0.0/16']]);
});

test("behind a front door the node-local API address is every node's own, never one node's", async () => {
  const { nobodysProblem } = await import('../../../../src/base/ownership.ts');
  const on = { enabled: true, baseDomain: 'c.example.com' };
  const live = { liveControllers: () => [] };
  const withDoor = reservedSpace(parseConfig({ spec: { frontDoor: on } }, 'kctl.yaml'), {
    certificates: [],
    controllers: live,
  });
  assert.equal(
    nobodysProblem('198.18.0.1', false, undefined, withDoor),
    "the node-local API address (every node's own)",
  );
  assert.equal(nobodysProblem('198.18.0.2', false, undefined, withDoor), undefined);
  const without = reservedSpace(parseConfig({}, 'kctl.yaml'), { certificates: [], controllers: live });
  assert.equal(nobodysProblem('198.18.0.1', false, undefined, without), undefined);
});
