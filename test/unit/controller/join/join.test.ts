import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseConfig } from '../../../../src/controller/config/config.ts';
import { configMismatch, type JoinRequest } from '../../../../src/controller/join/join-request.ts';
import { datastoreIdentity } from '../../../../src/etcd/kine.ts';
import { initialCluster, retryTransient, type EtcdMember } from '../../../../src/etcd/members.ts';

const cfg = parseConfig({ spec: { storage: { type: 'etcd' } } }, 'kctl.yaml');
const request = (over: Partial<JoinRequest> = {}): JoinRequest => ({
  name: 'c2',
  peerUrl: 'https://10.0.0.2:2380',
  storage: 'etcd',
  network: { podCIDR: '10.244.0.0/16', serviceCIDR: '10.96.0.0/12', clusterDomain: 'cluster.local' },
  ...over,
});

test('a joining controller with another storage or network than the cluster is refused, naming the field and the value to use', () => {
  assert.equal(configMismatch(cfg, request()), null);
  assert.match(
    configMismatch(cfg, request({ storage: 'kine' }))!,
    /stores its state in etcd, the joining controller is configured for kine; set spec\.storage\.type: etcd/,
  );
  assert.match(
    configMismatch(cfg, request({ network: { ...request().network, serviceCIDR: '10.100.0.0/16' } }))!,
    /spec\.network\.serviceCIDR is 10\.96\.0\.0\/12 in the cluster but 10\.100\.0\.0\/16 on the joining controller/,
  );
  assert.match(
    configMismatch(cfg, request({ network: { ...request().network, relay: 'controllers' } }))!,
    /spec\.network\.relay is none in the cluster but controllers on the joining controller; use the cluster's value/,
  );
  assert.equal(configMismatch(cfg, request({ network: { ...request().network, relay: 'none' } })), null);
});

test('kine: a joiner must name the same database (credentials and options aside); a SQLite cluster takes no second controller', () => {
  const kine = (dataSource?: string) =>
    parseConfig({ spec: { storage: { type: 'kine', kine: { dataSource } } } }, 'kctl.yaml');
  const shared = kine('postgres://kctl:secret@db.example:5432/kine?sslmode=disable');
  assert.equal(datastoreIdentity('postgres://other:pw@db.example:5432/kine'), 'postgres://db.example:5432/kine');
  assert.equal(datastoreIdentity(undefined), undefined);
  assert.equal(datastoreIdentity('sqlite:///var/lib/kctl/db/state.db'), undefined);
  assert.equal(datastoreIdentity('mysql://u:p@tcp(db:3306)/kine?tls=true'), 'mysql://tcp(db:3306)/kine');
  assert.equal(
    configMismatch(shared, request({ storage: 'kine', datastore: 'postgres://db.example:5432/kine' })),
    null,
  );
  const other = configMismatch(shared, request({ storage: 'kine', datastore: 'postgres://db.example:5432/other' }))!;
  assert.match(
    other,
    /datastore is postgres:\/\/db\.example:5432\/kine but the joining controller's is postgres:\/\/db\.example:5432\/other; set spec\.storage\.kine\.dataSource/,
  );
  assert.doesNotMatch(other, /secret/);
  assert.match(configMismatch(shared, request({ storage: 'kine' }))!, /joining controller's is a local SQLite file/);
  assert.match(
    configMismatch(kine(), request({ storage: 'kine' }))!,
    /SQLite file in one controller's data dir, which no other controller can share/,
  );
});

test("etcd's --initial-cluster for a learner names every member, the learner under its own name", () => {
  const members: EtcdMember[] = [
    { id: '1', name: 'c1', peerURLs: ['https://10.0.0.1:2380'], clientURLs: [], isLearner: false },
    { id: '2', name: '', peerURLs: ['https://10.0.0.2:2380'], clientURLs: [], isLearner: true },
  ];
  assert.equal(initialCluster(members, { id: '2', name: 'c2' }), 'c1=https://10.0.0.1:2380,c2=https://10.0.0.2:2380');
});

test('etcd calls are retried while etcd elects a leader, not for other errors', async () => {
  let calls = 0;
  const flaky = async () => {
    calls++;
    if (calls < 3) throw new Error('etcd /v3/cluster/member/list: etcdserver: leader changed');
    return 'members';
  };
  assert.equal(await retryTransient(flaky, 5000), 'members');
  assert.equal(calls, 3);
  calls = 0;
  await assert.rejects(
    retryTransient(async () => {
      calls++;
      throw new Error('etcdserver: member not found');
    }, 5000),
    /member not found/,
  );
  assert.equal(calls, 1);
});
