import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  agentServers,
  controllerLease,
  controllerLeaseName,
  followKey,
  memberLeaseName,
  liveControllers,
  MAX_LISTED_AGENTS,
  type Lease,
} from '../../../src/kube/controller-leases.ts';
import { konnectivityServer } from '../../../src/worker/agent.ts';
import { executableSource } from '../../../src/payload/upgrade-files.ts';

test('a controller lease names its API server and konnectivity address; only leases renewed within their duration are live', () => {
  const t0 = Date.parse('2026-11-23T10:00:00Z');
  const name = controllerLeaseName('10.0.0.1');
  assert.equal(name, 'kctl-controller-10-0-0-1');
  assert.equal(controllerLeaseName('fd00::1'), 'kctl-controller-fd00-1');
  // Controllers that share one address (pods of a hosted cluster) are told apart by their member names.
  assert.equal(memberLeaseName('10.0.0.1'), name);
  assert.equal(memberLeaseName('10.0.0.1', 'f1-7d9f8c6b5-x2x9k'), 'kctl-controller-f1-7d9f8c6b5-x2x9k');
  // As the API server hands it back: plain JSON.
  const lease = JSON.parse(
    JSON.stringify(
      controllerLease(
        name,
        { apiServer: 'https://10.0.0.1:6443', konnectivity: '10.0.0.1:8132', agents: [] },
        new Date(t0),
      ),
    ),
  ) as Lease;
  assert.equal(lease.spec?.renewTime, '2026-11-23T10:00:00.000000Z');
  const other = {
    metadata: {
      name: 'kctl-controller-b',
      annotations: { 'kctl.dev/api-server': 'https://b:6443', 'kctl.dev/konnectivity': 'b:8132' },
    },
    spec: { renewTime: '2026-11-23T09:59:50.000000Z', leaseDurationSeconds: 30 },
  };
  const noAddress = {
    metadata: { name: 'kctl-controller-c' },
    spec: { renewTime: '2026-11-23T10:00:00.000000Z', leaseDurationSeconds: 30 },
  };
  assert.deepEqual(
    liveControllers([lease, other, noAddress], t0 + 5_000).map((c) => c.name),
    ['kctl-controller-10-0-0-1', 'kctl-controller-b'],
  );
  // 20 s later: b's lease (renewed 10 s before t0) has run out; the first is still valid.
  assert.deepEqual(
    liveControllers([lease, other], t0 + 21_000).map((c) => c.name),
    ['kctl-controller-10-0-0-1'],
  );
  assert.deepEqual(liveControllers([lease], t0 + 30_000), []);
  assert.deepEqual(liveControllers([lease], t0)[0], {
    name,
    apiServer: 'https://10.0.0.1:6443',
    konnectivity: '10.0.0.1:8132',
    agents: [],
  });
});

test('each lease lists the agents its server holds; per agent, status names every controller that holds it', () => {
  const now = new Date('2026-11-23T10:00:00Z');
  const lease = (address: string, agents: string[]) =>
    JSON.parse(
      JSON.stringify(
        controllerLease(
          controllerLeaseName(address),
          { apiServer: `https://${address}:6443`, konnectivity: `${address}:8132`, agents },
          now,
        ),
      ),
    ) as Lease;
  const live = liveControllers(
    [lease('10.0.0.1', ['w2', 'w1']), lease('10.0.0.2', ['w1']), lease('10.0.0.3', [])],
    now.getTime(),
  );
  assert.deepEqual(live[0]!.agents, ['w1', 'w2']);
  assert.deepEqual(agentServers(live), [
    { agent: 'w1', servers: ['kctl-controller-10-0-0-1', 'kctl-controller-10-0-0-2'] },
    { agent: 'w2', servers: ['kctl-controller-10-0-0-1'] },
  ]);
  // A fleet larger than the annotation budget: the list is cut, the total kept.
  const many = Array.from({ length: MAX_LISTED_AGENTS + 3 }, (_, i) => `node-${String(i).padStart(5, '0')}`);
  const [big] = liveControllers([lease('10.0.0.9', many)], now.getTime());
  assert.equal(big!.agents.length, MAX_LISTED_AGENTS);
  assert.equal(big!.agentsTotal, MAX_LISTED_AGENTS + 3);
});

test("a lease names its host's front door; nodes reach the konnectivity server and executables there by name; a bad annotation is no door", () => {
  const t0 = Date.parse('2026-11-30T10:00:00Z');
  const frontDoor = {
    address: '10.0.0.1:443',
    api: 'alpha.c.test',
    konnectivity: 'konnectivity.alpha.c.test',
    join: 'join.alpha.c.test',
    nodeApi: 'node-api.alpha.c.test',
  };
  const base = { apiServer: 'https://10.0.0.1:6443', konnectivity: '10.0.0.1:8132', agents: [] };
  const lease = (extra: object) =>
    JSON.parse(JSON.stringify(controllerLease('kctl-controller-a', { ...base, ...extra }, new Date(t0)))) as Lease;
  const [withDoor] = liveControllers([lease({ frontDoor })], t0);
  assert.deepEqual(withDoor?.frontDoor, frontDoor);
  assert.deepEqual(konnectivityServer(withDoor!), {
    host: '10.0.0.1',
    port: 443,
    serverName: 'konnectivity.alpha.c.test',
  });
  assert.deepEqual(executableSource(withDoor!, '1.2.3'), {
    url: 'https://10.0.0.1:443/v1/executables/1.2.3',
    serverName: 'join.alpha.c.test',
  });
  const [without] = liveControllers([lease({ executables: 'https://10.0.0.1:9443' })], t0);
  assert.deepEqual(executableSource(without!, '1.2.3'), { url: 'https://10.0.0.1:9443/v1/executables/1.2.3' });
  assert.equal(without?.frontDoor, undefined);
  assert.deepEqual(konnectivityServer(without!), { host: '10.0.0.1', port: 8132 });
  const broken = lease({});
  broken.metadata.annotations!['kctl.dev/front-door'] = JSON.stringify({ ...frontDoor, address: 'no-port' });
  assert.equal(liveControllers([broken], t0)[0]?.frontDoor, undefined);
  // The node-local address pods reach the API at: kept when it is an IPv4 host:port, else left out.
  const withLocal = { ...frontDoor, nodeLocal: '198.18.0.1:6443' };
  assert.deepEqual(liveControllers([lease({ frontDoor: withLocal })], t0)[0]?.frontDoor, withLocal);
  for (const nodeLocal of ['198.18.0.1', 'api.example.com:6443', '[fd00::1]:6443'])
    assert.deepEqual(liveControllers([lease({ frontDoor: { ...frontDoor, nodeLocal } })], t0)[0]?.frontDoor, frontDoor);
});

test('the followers of the live controllers are told when an address or anything of a front door changes, not when agents do', () => {
  const base = { name: 'c1', apiServer: 'https://10.0.0.1:6443', konnectivity: '10.0.0.1:8132', agents: [] };
  const door = {
    address: '10.0.0.1:443',
    api: 'alpha.c.test',
    konnectivity: 'konnectivity.alpha.c.test',
    join: 'join.alpha.c.test',
    nodeApi: 'node-api.alpha.c.test',
    nodeLocal: '198.18.0.1:6443',
  };
  const key = followKey([{ ...base, frontDoor: door }]);
  assert.equal(followKey([{ ...base, agents: ['system:node:w1'], frontDoor: door }]), key);
  assert.notEqual(followKey([{ ...base, frontDoor: { ...door, nodeLocal: '198.18.0.9:6443' } }]), key);
  assert.notEqual(followKey([{ ...base, frontDoor: { ...door, address: '10.0.0.1:8443' } }]), key);
  assert.notEqual(followKey([base]), key);
});
